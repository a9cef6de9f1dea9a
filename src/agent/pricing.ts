// Token prices per model (config `pricing`), turned into the `cost_usd` meter (docs/contract.md §5).
import type { MeterAmounts } from '../../machines/policies/budget.js';

export interface ModelPrice {
  input_per_million_usd: number;
  output_per_million_usd: number;
}

/** Config `pricing`: model name (exactly as sent to the provider) -> price. */
export type Pricing = Record<string, ModelPrice>;

export interface TokenCounts {
  input_tokens: number;
  output_tokens: number;
}

export interface CostEstimate {
  cost_usd: number;
  /**
   * False when the model has no price: the cost is reported as 0 and a `cost_usd` budget cannot be
   * enforced for this model (it never fills). Callers surface this once (log / run metadata).
   */
  priced: boolean;
}

// Rounding to 1e-12 USD keeps float noise out of stored sums while staying far below any price.
const round12 = (x: number): number => Math.round(x * 1e12) / 1e12;

const nonNegative = (n: number): number => (Number.isFinite(n) && n > 0 ? n : 0);

export function priceOf(pricing: Pricing | undefined, model: string): ModelPrice | null {
  if (!pricing) return null;
  return Object.prototype.hasOwnProperty.call(pricing, model) ? pricing[model] : null;
}

export function estimateCostUsd(pricing: Pricing | undefined, model: string, usage: TokenCounts): CostEstimate {
  const price = priceOf(pricing, model);
  if (!price) return { cost_usd: 0, priced: false };
  const cost = (nonNegative(usage.input_tokens) * price.input_per_million_usd + nonNegative(usage.output_tokens) * price.output_per_million_usd) / 1_000_000;
  return { cost_usd: round12(cost), priced: true };
}

/**
 * What to reserve before one model call: its worst case (all input plus the full output
 * allowance). `priced` false means `cost_usd` was reserved as 0 (see CostEstimate).
 */
export function modelCallReservation(
  pricing: Pricing | undefined,
  model: string,
  worst: { input_tokens: number; max_output_tokens: number },
): { amounts: Required<Pick<MeterAmounts, 'tokens' | 'cost_usd' | 'model_calls'>>; priced: boolean } {
  const input = nonNegative(worst.input_tokens);
  const output = nonNegative(worst.max_output_tokens);
  const cost = estimateCostUsd(pricing, model, { input_tokens: input, output_tokens: output });
  return { amounts: { tokens: input + output, cost_usd: cost.cost_usd, model_calls: 1 }, priced: cost.priced };
}

/** What one finished model call actually used, in meter units (the settle amounts). */
export function modelCallUsage(
  pricing: Pricing | undefined,
  model: string,
  usage: TokenCounts,
): { amounts: Required<Pick<MeterAmounts, 'tokens' | 'cost_usd' | 'model_calls'>>; priced: boolean } {
  const cost = estimateCostUsd(pricing, model, usage);
  return {
    amounts: {
      tokens: nonNegative(usage.input_tokens) + nonNegative(usage.output_tokens),
      cost_usd: cost.cost_usd,
      model_calls: 1,
    },
    priced: cost.priced,
  };
}
