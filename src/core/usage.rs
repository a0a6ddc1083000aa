//! What runs cost: the tokens a provider reports for each completion, what they cost by a
//! price table, and the sums a run and an agent's day keep. Pure.
//!
//! Money is counted in integer micros (millionths of the price table's currency) so that
//! sums are exact, equal on every store and bit-for-bit the same in the simulator.

use std::collections::BTreeMap;

/// The tokens of one completion or a sum of them. `input` counts every prompt token,
/// `cached` those of them the provider served from its prompt cache (billed lower);
/// `reasoning` is the part of `output` a reasoning model spent thinking.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct TokenUsage {
    pub input: u64,
    pub cached: u64,
    pub output: u64,
    pub reasoning: u64,
}

impl TokenUsage {
    /// Input and output together: what a daily token cap counts.
    pub fn total(self) -> u64 {
        self.input.saturating_add(self.output)
    }

    pub fn add(&mut self, other: TokenUsage) {
        self.input = self.input.saturating_add(other.input);
        self.cached = self.cached.saturating_add(other.cached);
        self.output = self.output.saturating_add(other.output);
        self.reasoning = self.reasoning.saturating_add(other.reasoning);
    }

    /// The kinds and counts, in the names metrics and the API use.
    pub fn kinds(self) -> [(&'static str, u64); 4] {
        [("input", self.input), ("cached", self.cached), ("output", self.output), ("reasoning", self.reasoning)]
    }
}

/// What a model's tokens cost, in micros per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Price {
    pub input_micros_per_million: u64,
    /// Cached prompt tokens; a provider without a cache discount bills them as input.
    pub cached_micros_per_million: u64,
    pub output_micros_per_million: u64,
}

impl Price {
    /// What `usage` costs, in micros, rounded to the nearest micro.
    pub fn cost_micros(self, usage: TokenUsage) -> u64 {
        let cached = usage.cached.min(usage.input);
        let uncached = usage.input - cached;
        let millionths = u128::from(uncached) * u128::from(self.input_micros_per_million)
            + u128::from(cached) * u128::from(self.cached_micros_per_million)
            + u128::from(usage.output) * u128::from(self.output_micros_per_million);
        u64::try_from((millionths + 500_000) / 1_000_000).unwrap_or(u64::MAX)
    }
}

/// Prices per model name as a request names it; the engine's default model answers a
/// request that names none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PriceTable {
    pub default_model: Option<String>,
    pub models: BTreeMap<String, Price>,
}

impl PriceTable {
    /// The price of a completion that asked for `model` (or the default), if known.
    pub fn price(&self, model: Option<&str>) -> Option<Price> {
        let model = model.or(self.default_model.as_deref())?;
        self.models.get(model).copied()
    }
}

/// What one run spent: every completion's tokens, silent runs and failed ones included,
/// and their cost. `unpriced_calls` counts completions whose model has no price (their
/// tokens are in `tokens`, their cost is not in `cost_micros`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct RunUsage {
    pub tokens: TokenUsage,
    pub cost_micros: u64,
    pub unpriced_calls: u32,
}

impl RunUsage {
    /// Adds one completion's usage at `price`.
    pub fn record(&mut self, usage: TokenUsage, price: Option<Price>) {
        self.tokens.add(usage);
        match price {
            Some(price) => self.cost_micros = self.cost_micros.saturating_add(price.cost_micros(usage)),
            None => self.unpriced_calls = self.unpriced_calls.saturating_add(1),
        }
    }
}

/// Micros as a decimal amount of the currency, for people (`0.012345`).
pub fn format_micros(micros: u64) -> String {
    format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, cached: u64, output: u64) -> TokenUsage {
        TokenUsage { input, cached, output, reasoning: 0 }
    }

    #[test]
    fn cached_tokens_are_billed_at_their_own_price_and_the_rest_as_input() {
        // $2.50 per million input, $1.25 cached, $10 output.
        let price = Price {
            input_micros_per_million: 2_500_000,
            cached_micros_per_million: 1_250_000,
            output_micros_per_million: 10_000_000,
        };
        // 1,000 input of which 400 cached, 200 output: 600*2.5 + 400*1.25 + 200*10 = 4,000 micros.
        assert_eq!(price.cost_micros(usage(1_000, 400, 200)), 4_000);
        // A provider reporting more cached than input never underflows.
        assert_eq!(price.cost_micros(usage(10, 50, 0)), 13);
        // Rounded to the nearest micro: 1 token at $2.50/M is 2.5 micros.
        assert_eq!(price.cost_micros(usage(1, 0, 0)), 3);
    }

    #[test]
    fn a_run_sums_every_completion_and_counts_the_unpriced_ones() {
        let price = Price {
            input_micros_per_million: 1_000_000,
            cached_micros_per_million: 0,
            output_micros_per_million: 2_000_000,
        };
        let mut run = RunUsage::default();
        run.record(usage(1_000, 0, 100), Some(price));
        run.record(usage(500, 0, 50), None);
        assert_eq!(run.tokens, usage(1_500, 0, 150));
        assert_eq!(run.tokens.total(), 1_650);
        assert_eq!(run.cost_micros, 1_200);
        assert_eq!(run.unpriced_calls, 1);
    }

    #[test]
    fn a_request_without_a_model_is_priced_as_the_default_model() {
        let price = Price { input_micros_per_million: 1, cached_micros_per_million: 1, output_micros_per_million: 1 };
        let table = PriceTable {
            default_model: Some("small".to_owned()),
            models: BTreeMap::from([("small".to_owned(), price)]),
        };
        assert_eq!(table.price(None), Some(price));
        assert_eq!(table.price(Some("small")), Some(price));
        assert_eq!(table.price(Some("large")), None);
        assert_eq!(format_micros(1_234_567), "1.234567");
    }
}
