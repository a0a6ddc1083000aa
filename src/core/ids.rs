//! Identifiers of agents and heartbeats: `[a-z0-9-]{1,64}`, so they are safe in URLs,
//! HTTP headers, log lines and idempotency keys.

use std::cmp::Ordering;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::core::shared_text::SharedText;
use crate::limits::ID_CHARS_MAX;

/// Why a string is not a valid id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("must not be empty")]
    Empty,
    #[error("is {len} characters long; the limit is {ID_CHARS_MAX}")]
    TooLong { len: usize },
    #[error("contains {found:?}; only lowercase letters, digits and '-' are allowed")]
    BadChar { found: char },
}

fn validate(raw: &str) -> Result<(), IdError> {
    if raw.is_empty() {
        return Err(IdError::Empty);
    }
    let len = raw.chars().count();
    if len > ID_CHARS_MAX {
        return Err(IdError::TooLong { len });
    }
    match raw.chars().find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')) {
        Some(found) => Err(IdError::BadChar { found }),
        None => Ok(()),
    }
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        // Shared text: a key is cloned into every index of the driver and the store, and a
        // clone is a reference count, not two allocations (a million heartbeats, ADR 0014).
        // A thin pointer (the length lives beside the text): 8 bytes where `Arc<str>` took 16,
        // in each of the maps a heartbeat's key sits in; its header is 8 bytes, so an id of
        // up to 16 characters takes the allocator's smallest block.
        pub struct $name(SharedText);

        impl $name {
            /// Validates `raw` as an id.
            ///
            /// # Errors
            /// When `raw` is empty, too long, or has a character outside `[a-z0-9-]`.
            pub fn new(raw: impl AsRef<str>) -> Result<Self, IdError> {
                // Validated where it lies and copied once, into the shared text.
                let raw = raw.as_ref();
                validate(raw)?;
                SharedText::new(raw).map(Self).ok_or(IdError::TooLong { len: raw.len() })
            }

            pub fn as_str(&self) -> &str {
                self.0.as_str()
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(raw: String) -> Result<Self, IdError> {
                Self::new(raw)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0.as_str().to_owned()
            }
        }

        // Ordered by text, but two copies of one shared text (all of an agent's keys hold
        // its id's) are equal without reading it: a start-up sorts a million keys.
        // (`SharedText`'s order.)
        impl Ord for $name {
            #[inline]
            fn cmp(&self, other: &Self) -> Ordering {
                self.0.cmp(&other.0)
            }
        }

        impl PartialOrd for $name {
            fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
                Some(self.cmp(other))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.0.as_str())
            }
        }
    };
}

id_type!(
    /// The id of an agent (`main`, `ops-bot`).
    AgentId
);
id_type!(
    /// The id of a heartbeat, unique within its agent (`check-inbox`).
    HeartbeatId
);

impl HeartbeatId {
    /// The id that orders before every other (`-`, the lowest of the characters an id
    /// may hold): where a range of one agent's keys begins.
    pub fn lowest() -> Self {
        Self(SharedText::new("-").expect("a constant of one byte has a length in 32 bits"))
    }
}

/// A heartbeat's identity across the whole engine: ids are unique per agent only.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HeartbeatKey {
    pub agent: AgentId,
    pub heartbeat: HeartbeatId,
}

// Two thin references: the driver's maps hold a key four times a heartbeat.
const _: () = assert!(std::mem::size_of::<HeartbeatKey>() == 16);

/// The id of each agent's own heartbeat (the `HEARTBEAT.md` one, run in the agent's main
/// context): reserved, so no named heartbeat or cron job can take it.
pub const AGENT_HEARTBEAT_ID: &str = "main";

impl HeartbeatId {
    /// The agent heartbeat's id, [`AGENT_HEARTBEAT_ID`].
    pub fn agent_heartbeat() -> Self {
        // One text for every agent's.
        static AGENT_HEARTBEAT: std::sync::LazyLock<SharedText> = std::sync::LazyLock::new(|| {
            SharedText::new(AGENT_HEARTBEAT_ID).expect("a constant of four bytes has a length in 32 bits")
        });
        Self(AGENT_HEARTBEAT.clone())
    }

    /// Whether this is the id reserved for the agent heartbeat.
    pub fn is_reserved(&self) -> bool {
        &*self.0 == AGENT_HEARTBEAT_ID
    }
}

impl HeartbeatKey {
    /// The key of `agent`'s own heartbeat.
    pub fn agent_heartbeat(agent: &AgentId) -> Self {
        Self { agent: agent.clone(), heartbeat: HeartbeatId::agent_heartbeat() }
    }
}

impl fmt::Display for HeartbeatKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.agent, self.heartbeat)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserved_id_is_a_valid_id() {
        assert_eq!(HeartbeatId::new(AGENT_HEARTBEAT_ID), Ok(HeartbeatId::agent_heartbeat()));
        assert!(HeartbeatId::agent_heartbeat().is_reserved());
    }

    #[test]
    fn ids_order_by_their_text_whether_shared_or_copied() {
        let id = |raw: &str| AgentId::new(raw).expect("valid");
        let shared = id("ops");
        assert_eq!(shared.cmp(&shared.clone()), Ordering::Equal);
        assert_eq!(shared.cmp(&id("ops")), Ordering::Equal);
        assert_eq!(id("ops").cmp(&id("ops-bot")), Ordering::Less);
        assert_eq!(id("b").cmp(&id("a-z")), Ordering::Greater);
    }

    #[test]
    fn accepts_the_documented_alphabet() {
        assert!(HeartbeatId::new("check-inbox-2").is_ok());
        assert_eq!(HeartbeatId::new("a".repeat(64)).map(|id| id.as_str().len()), Ok(64));
    }

    #[test]
    fn rejects_with_a_reason() {
        assert_eq!(AgentId::new(""), Err(IdError::Empty));
        assert_eq!(AgentId::new("a".repeat(65)), Err(IdError::TooLong { len: 65 }));
        assert_eq!(AgentId::new("Main"), Err(IdError::BadChar { found: 'M' }));
        assert_eq!(AgentId::new("a b"), Err(IdError::BadChar { found: ' ' }));
        assert_eq!(AgentId::new("a/b"), Err(IdError::BadChar { found: '/' }));
    }

    #[test]
    fn serde_validates() {
        let bad: Result<AgentId, _> = serde_json::from_str("\"UPPER\"");
        assert!(bad.is_err());
    }
}
