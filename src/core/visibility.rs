//! What a target shows of heartbeat runs (OpenClaw's `showOk`, `showAlerts`,
//! `useIndicator`): defaults, overridden per adapter, overridden per target.

use std::collections::BTreeMap;

use crate::core::delivery_target::DeliveryTarget;

/// What one target shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Visibility {
    /// Deliver acknowledgements (`HEARTBEAT_OK`): their note, never the token.
    pub show_ok: bool,
    /// Deliver alerts.
    pub show_alerts: bool,
    /// Events carry an indicator (`ok`, `alert`, `error`) a UI can show.
    pub use_indicator: bool,
}

impl Default for Visibility {
    fn default() -> Self {
        Self { show_ok: false, show_alerts: true, use_indicator: true }
    }
}

impl Visibility {
    /// Nothing a run could produce would be seen: runs skip with `alerts-disabled` before
    /// any LLM call.
    pub fn shows_nothing(self) -> bool {
        !self.show_ok && !self.show_alerts && !self.use_indicator
    }
}

/// Some of the three settings, set at one level.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VisibilityOverride {
    pub show_ok: Option<bool>,
    pub show_alerts: Option<bool>,
    pub use_indicator: Option<bool>,
}

impl VisibilityOverride {
    fn over(self, base: Visibility) -> Visibility {
        Visibility {
            show_ok: self.show_ok.unwrap_or(base.show_ok),
            show_alerts: self.show_alerts.unwrap_or(base.show_alerts),
            use_indicator: self.use_indicator.unwrap_or(base.use_indicator),
        }
    }
}

/// The three levels, resolved per target: target > adapter > defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VisibilityRules {
    pub defaults: Visibility,
    /// By adapter name (`webhook`, `stdout`).
    pub adapters: BTreeMap<String, VisibilityOverride>,
    /// By target (`webhook:ops`).
    pub targets: BTreeMap<String, VisibilityOverride>,
}

impl VisibilityRules {
    pub fn resolve(&self, target: &DeliveryTarget) -> Visibility {
        let mut visibility = self.defaults;
        if let Some(adapter) = self.adapters.get(target.adapter()) {
            visibility = adapter.over(visibility);
        }
        // Looked up by the target's own text: a formatted copy was an allocation for each
        // of the three reads a run makes.
        if let Some(own) = self.targets.get(target.text().as_str()) {
            visibility = own.over(visibility);
        }
        visibility
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_wins_over_the_adapter_over_the_defaults() {
        let rules = VisibilityRules {
            defaults: Visibility::default(),
            adapters: BTreeMap::from([(
                "webhook".to_owned(),
                VisibilityOverride { show_ok: Some(true), use_indicator: Some(false), ..Default::default() },
            )]),
            targets: BTreeMap::from([(
                "webhook:ops".to_owned(),
                VisibilityOverride { show_ok: Some(false), show_alerts: Some(false), ..Default::default() },
            )]),
        };
        let target = |text: &str| DeliveryTarget::parse(text).expect("valid target");
        assert_eq!(rules.resolve(&target("stdout")), Visibility::default());
        let webhook = rules.resolve(&target("webhook:dev"));
        assert_eq!(webhook, Visibility { show_ok: true, show_alerts: true, use_indicator: false });
        let ops = rules.resolve(&target("webhook:ops"));
        assert_eq!(ops, Visibility { show_ok: false, show_alerts: false, use_indicator: false });
        assert!(ops.shows_nothing());
        assert!(!Visibility::default().shows_nothing());
    }
}
