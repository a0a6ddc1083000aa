//! `[llm.prices."MODEL"]`: what each model's tokens cost, per million tokens, and the
//! agents' money caps. Amounts are decimals in the config and integer micros inside
//! (`core::usage`), so sums are exact.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{ConfigError, Validator};
use crate::core::usage::{Price, PriceTable};
use crate::limits::PRICE_PER_MILLION_MAX;

/// One model's prices, per million tokens.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPrice {
    input: Option<f64>,
    /// Prompt tokens served from the provider's cache; the input price when absent.
    cached_input: Option<f64>,
    output: Option<f64>,
}

impl Validator<'_> {
    /// The price table of `[llm.prices]`, with `default_model` answering requests that
    /// name no model.
    pub(super) fn prices(
        &self,
        raw: BTreeMap<String, RawPrice>,
        default_model: Option<&str>,
    ) -> Result<PriceTable, ConfigError> {
        let mut models = BTreeMap::new();
        for (model, price) in raw {
            let field = format!("llm.prices.{model:?}");
            if model.trim().is_empty() {
                return Err(self.error("llm.prices", "a model name is empty"));
            }
            let required = |value: Option<f64>, name: &str| {
                value.ok_or_else(|| self.error(format!("{field}.{name}"), "is missing (a price per million tokens)"))
            };
            let input =
                self.micros(&format!("{field}.input"), required(price.input, "input")?, PRICE_PER_MILLION_MAX)?;
            let output =
                self.micros(&format!("{field}.output"), required(price.output, "output")?, PRICE_PER_MILLION_MAX)?;
            let cached = match price.cached_input {
                Some(value) => self.micros(&format!("{field}.cached_input"), value, PRICE_PER_MILLION_MAX)?,
                None => input,
            };
            let price = Price {
                input_micros_per_million: input,
                cached_micros_per_million: cached,
                output_micros_per_million: output,
            };
            models.insert(model, price);
        }
        Ok(PriceTable { default_model: default_model.map(str::to_owned), models })
    }

    /// An amount of money in micros: a finite decimal from 0 to `max`.
    pub(super) fn micros(&self, field: &str, value: f64, max: f64) -> Result<u64, ConfigError> {
        if !value.is_finite() || value < 0.0 || value > max {
            return Err(self.error(field, format!("{value} is out of range; allowed from 0 to {max}")));
        }
        // In range, so the product fits a u64 and the cast neither wraps nor saturates.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Ok((value * 1_000_000.0).round() as u64)
    }
}
