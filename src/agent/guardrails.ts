// Input guardrails: checked before the model sees a user's input (config `agent.guardrails`).
// Order: length (cheap, and keeps the regexes off huge inputs), operator deny patterns, then the
// built-in prompt-injection heuristics. The first failing check answers.
//
// The injection list is deliberately small and phrase-shaped: each pattern needs an instruction
// verb AND an object that only makes sense as an attack ("previous instructions", "your system
// prompt", "DAN"), so ordinary sentences ("don't ignore my previous email", "what is a system
// prompt?") pass. It is a tripwire for the common copy-paste attacks, not a classifier.

export interface GuardrailsConfig {
  /** Longest accepted input, in Unicode code points. Null/undefined = no limit. */
  max_input_chars?: number | null;
  /** JavaScript regular expression sources, matched case-insensitively anywhere in the input. */
  deny_patterns?: string[];
  /** Built-in prompt-injection heuristics. Default true. */
  injection_check?: boolean;
}

export type GuardrailRule = 'max_input_chars' | 'deny_pattern' | 'prompt_injection';

export type GuardrailResult = { allowed: true } | { allowed: false; rule: GuardrailRule; message: string; matched?: string };

export interface CompiledGuardrails {
  readonly max_input_chars: number | null;
  readonly deny: ReadonlyArray<{ source: string; re: RegExp }>;
  readonly injection_check: boolean;
}

export interface InjectionPattern {
  id: string;
  description: string;
  re: RegExp;
}

/** The built-in heuristics, case-insensitive. Listed in docs/budgets.md (guardrails section). */
export const PROMPT_INJECTION_PATTERNS: ReadonlyArray<InjectionPattern> = [
  {
    id: 'ignore_previous_instructions',
    description: 'ignore / disregard / forget / override (all) previous|prior|above|earlier|system instructions|prompt|rules',
    re: /\b(?:ignore|disregard|forget|override|bypass)\s+(?:all\s+|any\s+|every\s+)?(?:of\s+)?(?:the\s+|your\s+|these\s+|those\s+)?(?:previous|prior|above|earlier|preceding|foregoing|original|initial|system|developer)\s+(?:instructions?|prompts?|rules|directions|directives|guidelines)\b/i,
  },
  {
    id: 'ignore_your_instructions',
    description: 'ignore / disregard (all) your instructions|rules|guidelines|programming',
    re: /\b(?:ignore|disregard)\s+(?:all\s+)?(?:of\s+)?your\s+(?:instructions|rules|guidelines|programming|directives|restrictions)\b/i,
  },
  {
    id: 'reveal_system_prompt',
    description: 'reveal|show|print|repeat ... your system prompt / hidden instructions',
    re: /\b(?:(?:reveal|leak|dump)\s+(?:to\s+me\s+)?(?:your|the)|(?:show|print|repeat|display|output|tell)\s+(?:me\s+)?your)\s+(?:full\s+|entire\s+|original\s+|hidden\s+|initial\s+|secret\s+|exact\s+)*(?:system\s+prompt|system\s+message|system\s+instructions|hidden\s+instructions|initial\s+instructions|original\s+instructions)\b/i,
  },
  {
    id: 'jailbreak_persona',
    description: 'you are now DAN / in developer|god|jailbreak mode; "do anything now"; enable DAN|developer mode',
    re: /\byou\s+are\s+now\s+(?:DAN\b|in\s+(?:developer|god|jailbreak|unrestricted|DAN)\s+mode|jailbroken|an?\s+unrestricted\b)|\bdo\s+anything\s+now\b|\b(?:enable|enter|activate|switch\s+to)\s+(?:developer|god|jailbreak|DAN)\s+mode\b/i,
  },
  {
    id: 'no_restrictions',
    description: 'pretend / act as if you have no restrictions|rules|guidelines|filters',
    re: /\b(?:pretend|act\s+as\s+if|act\s+like|imagine)\s+(?:that\s+)?you\s+(?:have|had|are\s+under)\s+no\s+(?:restrictions|rules|guidelines|filters|limitations|content\s+polic(?:y|ies)|safety\s+guidelines)\b/i,
  },
  {
    id: 'chat_template_tokens',
    description: 'raw chat-template control tokens (<|im_start|>, <|system|>, [INST])',
    re: /<\|im_start\|>|<\|im_end\|>|<\|system\|>|<\|endoftext\|>|\[\/?INST\]/i,
  },
];

export class GuardrailConfigError extends Error {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(message);
    this.name = 'GuardrailConfigError';
  }
}

/** Validates and compiles the config once; throws GuardrailConfigError naming the bad field. */
export function compileGuardrails(cfg: GuardrailsConfig | undefined = {}): CompiledGuardrails {
  const max = cfg.max_input_chars ?? null;
  if (max !== null && (!Number.isInteger(max) || max < 1)) {
    throw new GuardrailConfigError('agent.guardrails.max_input_chars', 'agent.guardrails.max_input_chars: must be an integer >= 1');
  }
  const deny = (cfg.deny_patterns ?? []).map((source, i) => {
    const field = `agent.guardrails.deny_patterns[${i}]`;
    if (typeof source !== 'string' || source === '') throw new GuardrailConfigError(field, `${field}: must be a non-empty string`);
    try {
      return { source, re: new RegExp(source, 'i') };
    } catch (e) {
      throw new GuardrailConfigError(field, `${field}: invalid regular expression /${source}/: ${(e as Error).message}`);
    }
  });
  return Object.freeze({ max_input_chars: max, deny: Object.freeze(deny), injection_check: cfg.injection_check ?? true });
}

const compiledCache = new WeakMap<GuardrailsConfig, CompiledGuardrails>();

function isCompiled(cfg: GuardrailsConfig | CompiledGuardrails): cfg is CompiledGuardrails {
  return Array.isArray((cfg as CompiledGuardrails).deny);
}

/** Code-point length, counted only when the UTF-16 length could exceed the limit. */
function exceeds(text: string, max: number): number | null {
  if (text.length <= max) return null;
  let n = 0;
  for (const _ of text) n++;
  return n > max ? n : null;
}

const MATCH_SHOWN = 200;
const shown = (s: string): string => (s.length > MATCH_SHOWN ? `${s.slice(0, MATCH_SHOWN)}…` : s);

export function checkInput(text: string, cfg: GuardrailsConfig | CompiledGuardrails | undefined = {}): GuardrailResult {
  let g: CompiledGuardrails;
  if (isCompiled(cfg)) g = cfg;
  else {
    g = compiledCache.get(cfg) ?? compileGuardrails(cfg);
    compiledCache.set(cfg, g);
  }

  if (g.max_input_chars !== null) {
    const n = exceeds(text, g.max_input_chars);
    if (n !== null) {
      return { allowed: false, rule: 'max_input_chars', message: `Input is ${n} characters; the limit is ${g.max_input_chars}.` };
    }
  }
  for (const { re } of g.deny) {
    const m = re.exec(text);
    if (m) return { allowed: false, rule: 'deny_pattern', message: 'Input matches a denied pattern.', matched: shown(m[0]) };
  }
  if (g.injection_check) {
    for (const p of PROMPT_INJECTION_PATTERNS) {
      const m = p.re.exec(text);
      if (m) {
        return { allowed: false, rule: 'prompt_injection', message: `Input looks like a prompt-injection attempt (${p.id}).`, matched: shown(m[0]) };
      }
    }
  }
  return { allowed: true };
}
