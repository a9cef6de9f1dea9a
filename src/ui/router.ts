// Path routing under /ui (the server answers every /ui/<route> with the page).
import { useEffect, useState } from 'preact/hooks';

export interface Route {
  parts: string[];
  query: URLSearchParams;
}

function current(): Route {
  const rest = location.pathname.replace(/^\/ui\/?/, '');
  return { parts: rest.split('/').filter(Boolean).map(decodeURIComponent), query: new URLSearchParams(location.search) };
}

export function navigate(to: string): void {
  history.pushState(null, '', to);
  dispatchEvent(new PopStateEvent('popstate'));
}

/** onClick for <a href="/ui/…">: navigate without a page load. */
export function link(e: MouseEvent): void {
  const a = e.currentTarget as HTMLAnchorElement;
  if (e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
  e.preventDefault();
  navigate(a.getAttribute('href')!);
}

export function useRoute(): Route {
  const [r, setR] = useState(current);
  useEffect(() => {
    const on = () => setR(current());
    addEventListener('popstate', on);
    return () => removeEventListener('popstate', on);
  }, []);
  return r;
}

/** Calls fn now and every ms while mounted (and when deps change). */
export function usePoll(fn: () => void | Promise<void>, ms: number, deps: unknown[] = []): void {
  useEffect(() => {
    let stop = false;
    let timer: ReturnType<typeof setTimeout>;
    const tick = async () => {
      try {
        await fn();
      } catch {
        /* shown by fn */
      }
      if (!stop) timer = setTimeout(tick, ms);
    };
    tick();
    return () => {
      stop = true;
      clearTimeout(timer);
    };
  }, deps);
}
