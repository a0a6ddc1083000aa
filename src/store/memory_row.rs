//! A heartbeat's row in the memory store, packed: a million rows are most of what the
//! store holds, and a row that kept its own `HeartbeatDef` and `HeartbeatState` took 288 of
//! a heartbeat's 522 bytes (`docs/performance.md`, "The memory store's rows packed").
//!
//! The row's key is the map's, so the definition is kept without it ([`Body`]) and rows
//! of equal definitions (a tenant's template, a config's alike jobs) share one. The state
//! is kept as plain numbers, the next slot without `Option`'s padding, and what few rows
//! have (a disabled reason, a breaker's opening, an edit's seeded fingerprint) out of line.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;

use crate::core::active_hours::ActiveHours;
use crate::core::delivery_target::DeliveryTarget;
use crate::core::heartbeat::{Heartbeat, HeartbeatDef, HeartbeatState, JobKind, Origin};
use crate::core::ids::HeartbeatKey;
use crate::core::policy::RunPolicy;
use crate::core::schedule::Schedule;
use crate::core::tool_policy::SharedJobTools;

/// A definition but its key: every field of [`HeartbeatDef`] else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Body {
    pub kind: JobKind,
    pub prompt: Arc<str>,
    pub schedule: Schedule,
    pub policy: RunPolicy,
    pub delete_after_run: bool,
    pub dedup: bool,
    pub target: DeliveryTarget,
    pub active_hours: Option<ActiveHours>,
    pub timeout: Duration,
    pub origin: Origin,
    pub tools: SharedJobTools,
    pub model: Option<String>,
}

impl Body {
    /// `def` without its key, as `origin` (its texts shared with `def`'s).
    pub fn of(def: &HeartbeatDef, origin: Origin) -> Self {
        let HeartbeatDef {
            key: _,
            kind,
            prompt,
            schedule,
            policy,
            delete_after_run,
            dedup,
            target,
            active_hours,
            timeout,
            origin: _,
            tools,
            model,
        } = def;
        Self {
            kind: *kind,
            prompt: Arc::clone(prompt),
            schedule: schedule.clone(),
            policy: *policy,
            delete_after_run: *delete_after_run,
            dedup: *dedup,
            target: target.clone(),
            active_hours: active_hours.clone(),
            timeout: *timeout,
            origin,
            tools: tools.clone(),
            model: model.clone(),
        }
    }

    /// The definition of `key`.
    pub fn def(&self, key: &HeartbeatKey) -> HeartbeatDef {
        let Self {
            kind,
            prompt,
            schedule,
            policy,
            delete_after_run,
            dedup,
            target,
            active_hours,
            timeout,
            origin,
            tools,
            model,
        } = self;
        HeartbeatDef {
            key: key.clone(),
            kind: *kind,
            prompt: Arc::clone(prompt),
            schedule: schedule.clone(),
            policy: *policy,
            delete_after_run: *delete_after_run,
            dedup: *dedup,
            target: target.clone(),
            active_hours: active_hours.clone(),
            timeout: *timeout,
            origin: *origin,
            tools: tools.clone(),
            model: model.clone(),
        }
    }

    /// Whether `def` is this body in every field the fingerprint reads but its key (which
    /// the row's map holds): every field but `origin`. Written out field by field, so a
    /// new field must be placed here.
    pub fn same_but_origin(&self, def: &HeartbeatDef) -> bool {
        let Self {
            kind,
            prompt,
            schedule,
            policy,
            delete_after_run,
            dedup,
            target,
            active_hours,
            timeout,
            origin: _,
            tools,
            model,
        } = self;
        *kind == def.kind
            && *prompt == def.prompt
            && *schedule == def.schedule
            && *policy == def.policy
            && *delete_after_run == def.delete_after_run
            && *dedup == def.dedup
            && *target == def.target
            && *active_hours == def.active_hours
            && *timeout == def.timeout
            && *tools == def.tools
            && *model == def.model
    }
}

/// Whether and how a row was seeded from the config, which a later seed compares with its
/// own definition to tell whether the config changed (as the SQL stores' fingerprint
/// column does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seeded {
    /// Never seeded: a heartbeat made at run time.
    Never,
    /// Seeded, and its body is still the seeded one. Its fingerprint is taken only when a
    /// later seed or edit needs it: hashing every definition was most of a first seed.
    AsStored,
    /// Seeded, then edited at run time: the seeded definition's fingerprint is kept in the
    /// row's `Rare`.
    Edited,
}

/// One heartbeat's definition (shared) and state (packed). 40 bytes where the row with a
/// `HeartbeatState` and a definition of its own took 96 and 192: `HeartbeatState`'s
/// optional instants are 24 bytes each (the next slot here 12), and what few rows have is
/// kept apart (`Rare`).
#[derive(Debug, Clone)]
pub(super) struct Row {
    body: Arc<Body>,
    /// `None` when all of it would be.
    rare: Option<Box<Rare>>,
    // The next slot as whole seconds and the nanoseconds beyond (`parts`), apart, so that
    // no padding follows either.
    next_slot_second: i64,
    next_slot_nanosecond: i32,
    consecutive_failures: u32,
    enabled: bool,
    seeded: Seeded,
}

/// What a row holds only while disabled, after its breaker opened, or after a run-time edit
/// of a seeded definition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Rare {
    disabled_reason: Option<Box<str>>,
    breaker_opened_at: Option<Timestamp>,
    /// The seeded definition's fingerprint, when the row is `Seeded::Edited`.
    seeded_fingerprint: Option<[u8; 32]>,
}

impl Row {
    /// A row seeded from the config: `body` with a fresh state.
    pub fn seeded(body: Arc<Body>, state: &HeartbeatState) -> Self {
        Self::with(body, state, Seeded::AsStored, None)
    }

    /// A row stored at run time with `def` and a fresh state, replacing `before` (the row
    /// of `key` it replaces, if any).
    pub fn edited(key: &HeartbeatKey, def: &HeartbeatDef, state: &HeartbeatState, before: Option<&Row>) -> Self {
        let (seeded, fingerprint) = match before {
            None => (Seeded::Never, None),
            Some(before) => match before.seeded {
                Seeded::Never => (Seeded::Never, None),
                Seeded::AsStored => (Seeded::Edited, Some(before.def(key).fingerprint_digest())),
                Seeded::Edited => (Seeded::Edited, before.rare.as_ref().and_then(|rare| rare.seeded_fingerprint)),
            },
        };
        Self::with(Arc::new(Body::of(def, def.origin)), state, seeded, fingerprint)
    }

    fn with(body: Arc<Body>, state: &HeartbeatState, seeded: Seeded, seeded_fingerprint: Option<[u8; 32]>) -> Self {
        let rare = seeded_fingerprint
            .map(|fingerprint| Box::new(Rare { seeded_fingerprint: Some(fingerprint), ..Rare::default() }));
        let mut row = Self {
            body,
            rare,
            next_slot_second: 0,
            next_slot_nanosecond: NONE_NANOSECOND,
            consecutive_failures: 0,
            enabled: true,
            seeded,
        };
        row.set_state(state);
        row
    }

    /// The heartbeat of `key`, this row's.
    pub fn heartbeat(&self, key: &HeartbeatKey) -> Heartbeat {
        Heartbeat { def: self.def(key), state: self.state() }
    }

    pub fn body(&self) -> &Body {
        &self.body
    }

    /// The definition of `key`, this row's.
    pub fn def(&self, key: &HeartbeatKey) -> HeartbeatDef {
        self.body.def(key)
    }

    pub fn state(&self) -> HeartbeatState {
        let rare = self.rare.as_deref();
        HeartbeatState {
            enabled: self.enabled,
            disabled_reason: rare.and_then(|rare| rare.disabled_reason.clone()),
            consecutive_failures: self.consecutive_failures,
            next_slot: instant(self.next_slot_second, self.next_slot_nanosecond),
            breaker_opened_at: rare.and_then(|rare| rare.breaker_opened_at),
        }
    }

    fn set_state(&mut self, state: &HeartbeatState) {
        let HeartbeatState { enabled, disabled_reason, consecutive_failures, next_slot, breaker_opened_at } = state;
        self.enabled = *enabled;
        self.consecutive_failures = *consecutive_failures;
        (self.next_slot_second, self.next_slot_nanosecond) = parts(*next_slot);
        let seeded_fingerprint = self.rare.as_ref().and_then(|rare| rare.seeded_fingerprint);
        let rare = Rare {
            disabled_reason: disabled_reason.clone(),
            breaker_opened_at: *breaker_opened_at,
            seeded_fingerprint,
        };
        match &mut self.rare {
            // A row that keeps its box (a disabled row's every run) changes it in place.
            Some(kept) if rare != Rare::default() => **kept = rare,
            _ if rare == Rare::default() => self.rare = None,
            _ => self.rare = Some(Box::new(rare)),
        }
    }

    /// Changes the state with `change`, which sees and edits it whole.
    pub fn change_state<T>(&mut self, change: impl FnOnce(&mut HeartbeatState) -> T) -> T {
        let mut state = self.state();
        let answer = change(&mut state);
        self.set_state(&state);
        answer
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures
    }

    pub fn set_next_slot(&mut self, at: Timestamp) {
        (self.next_slot_second, self.next_slot_nanosecond) = parts(Some(at));
    }

    /// Whether a seed of `def` (for `key`) finds the config as this row was seeded from
    /// it. The same answer as comparing fingerprints, which leave out only `origin`: equal
    /// definitions have equal fingerprints, so only unequal ones are hashed.
    pub fn seeded_unchanged(&self, key: &HeartbeatKey, def: &HeartbeatDef) -> bool {
        match self.seeded {
            Seeded::Never => false,
            Seeded::AsStored => {
                self.body.same_but_origin(def) || self.def(key).fingerprint_digest() == def.fingerprint_digest()
            }
            Seeded::Edited => {
                let seeded = self.rare.as_ref().and_then(|rare| rare.seeded_fingerprint);
                seeded.is_some_and(|fingerprint| fingerprint == def.fingerprint_digest())
            }
        }
    }
}

/// The nanoseconds of no instant, which stand for `None`: a `Timestamp`'s are within
/// -999,999,999..=999,999,999.
const NONE_NANOSECOND: i32 = i32::MIN;

/// An optional instant as whole seconds and the nanoseconds beyond: 12 bytes where
/// `Option<Timestamp>` takes 24.
fn parts(at: Option<Timestamp>) -> (i64, i32) {
    match at {
        Some(at) => (at.as_second(), at.subsec_nanosecond()),
        None => (0, NONE_NANOSECOND),
    }
}

/// The instant of `parts`.
fn instant(second: i64, nanosecond: i32) -> Option<Timestamp> {
    if nanosecond == NONE_NANOSECOND {
        return None;
    }
    // Made from a `Timestamp`'s own parts, so always in range.
    Timestamp::new(second, nanosecond).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::heartbeat::test_def;

    #[test]
    fn a_row_is_packed_into_40_bytes() {
        assert!(std::mem::size_of::<Row>() <= 40, "{} bytes", std::mem::size_of::<Row>());
    }

    #[test]
    fn a_state_comes_back_as_it_was_kept() {
        let def = test_def("main", "a", 60);
        let instants = [
            Timestamp::UNIX_EPOCH,
            Timestamp::new(1_800_000_000, 123_456_789).expect("valid"),
            Timestamp::new(-62_000_000_000, -999_999_999).expect("valid"),
            Timestamp::MIN,
            Timestamp::MAX,
        ];
        for at in instants {
            let state = HeartbeatState {
                enabled: false,
                disabled_reason: Some("circuit-breaker".into()),
                consecutive_failures: 7,
                next_slot: Some(at),
                breaker_opened_at: Some(at),
            };
            let row = Row::seeded(Arc::new(Body::of(&def, Origin::Config)), &state);
            assert_eq!(row.state(), state);
        }
        let fresh = HeartbeatState::stored_at(&def.schedule, Timestamp::UNIX_EPOCH);
        let mut row = Row::seeded(Arc::new(Body::of(&def, Origin::Config)), &fresh);
        assert_eq!(row.state(), fresh);
        row.change_state(|state| state.next_slot = None);
        assert_eq!(row.state().next_slot, None);
        assert_eq!(row.state().breaker_opened_at, None);
        assert!(row.rare.is_none(), "a fresh state has nothing rare");
        row.change_state(|state| (state.enabled, state.disabled_reason) = (false, Some("user".into())));
        assert!(row.rare.is_some());
        row.change_state(|state| (state.enabled, state.disabled_reason) = (true, None));
        assert!(row.rare.is_none(), "what is rare leaves with the state that needed it");
    }

    #[test]
    fn a_body_gives_back_the_definition_it_was_made_of() {
        let def = HeartbeatDef { model: Some("small".into()), ..test_def("main", "a", 60) };
        let body = Body::of(&def, def.origin);
        assert_eq!(body.def(&def.key), def);
        assert!(body.same_but_origin(&def));
        let other_origin = Body::of(&def, Origin::Runtime);
        assert_eq!(other_origin.def(&def.key).origin, Origin::Runtime);
        assert!(other_origin.same_but_origin(&def), "the origin is not compared");
        assert!(!body.same_but_origin(&HeartbeatDef { prompt: "Else.".into(), ..def.clone() }));
    }

    #[test]
    fn an_edit_keeps_the_fingerprint_of_what_was_seeded() {
        let seeded = test_def("main", "a", 60);
        let key = seeded.key.clone();
        let fresh = HeartbeatState::stored_at(&seeded.schedule, Timestamp::UNIX_EPOCH);
        let row = Row::seeded(Arc::new(Body::of(&seeded, Origin::Config)), &fresh);
        assert!(row.seeded_unchanged(&key, &seeded));
        let edit = HeartbeatDef { prompt: "Edited.".into(), ..seeded.clone() };
        let mut edited = Row::edited(&key, &edit, &fresh, Some(&row));
        assert!(edited.seeded_unchanged(&key, &seeded), "the config is still the one seeded");
        edited.change_state(|state| (state.enabled, state.disabled_reason) = (false, Some("user".into())));
        edited.change_state(|state| (state.enabled, state.disabled_reason) = (true, None));
        assert!(edited.seeded_unchanged(&key, &seeded), "a change of state keeps the seeded fingerprint");
        assert!(!edited.seeded_unchanged(&key, &edit), "the edit is not what the config says");
        let again = Row::edited(&key, &seeded, &fresh, Some(&edited));
        assert!(again.seeded_unchanged(&key, &seeded), "a second edit keeps the first seed's fingerprint");
        let made = Row::edited(&key, &seeded, &fresh, None);
        assert!(!made.seeded_unchanged(&key, &seeded), "a row made at run time was never seeded");
    }
}
