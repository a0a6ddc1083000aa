//! `[visibility]`: what targets show of runs, with per-adapter and per-target overrides.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{ConfigError, Validator};
use crate::core::delivery_target::DeliveryTarget;
use crate::core::visibility::{Visibility, VisibilityOverride, VisibilityRules};
use crate::delivery::settings::AdapterSettings;

/// The adapters a per-adapter override may name.
const ADAPTERS: [&str; 7] =
    [DeliveryTarget::STDOUT, "webhook", "discord", "discord-webhook", "slack", "slack-webhook", "telegram"];

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawVisibility {
    show_ok: Option<bool>,
    show_alerts: Option<bool>,
    use_indicator: Option<bool>,
    #[serde(default)]
    adapters: BTreeMap<String, RawVisibilityOverride>,
    #[serde(default)]
    targets: BTreeMap<String, RawVisibilityOverride>,
}

#[derive(Deserialize, Default, Clone, Copy)]
#[serde(deny_unknown_fields)]
pub(super) struct RawVisibilityOverride {
    show_ok: Option<bool>,
    show_alerts: Option<bool>,
    use_indicator: Option<bool>,
}

impl From<RawVisibilityOverride> for VisibilityOverride {
    fn from(raw: RawVisibilityOverride) -> Self {
        Self { show_ok: raw.show_ok, show_alerts: raw.show_alerts, use_indicator: raw.use_indicator }
    }
}

impl Validator<'_> {
    pub(super) fn visibility(
        &self,
        raw: RawVisibility,
        configured: &AdapterSettings,
    ) -> Result<VisibilityRules, ConfigError> {
        let base = Visibility::default();
        let defaults = Visibility {
            show_ok: raw.show_ok.unwrap_or(base.show_ok),
            show_alerts: raw.show_alerts.unwrap_or(base.show_alerts),
            use_indicator: raw.use_indicator.unwrap_or(base.use_indicator),
        };
        let mut adapters = BTreeMap::new();
        for (name, level) in raw.adapters {
            if !ADAPTERS.contains(&name.as_str()) {
                let problem = format!("{name:?} is not an adapter; use one of {ADAPTERS:?}");
                return Err(self.error(format!("visibility.adapters.{name}"), problem));
            }
            adapters.insert(name, level.into());
        }
        let mut targets = BTreeMap::new();
        for (name, level) in raw.targets {
            let target = self.target(&format!("visibility.targets.{name:?}"), Some(name.clone()), None, configured)?;
            targets.insert(target.to_string(), level.into());
        }
        Ok(VisibilityRules { defaults, adapters, targets })
    }
}
