//! Where a call for an agent is answered on a node of a cluster (ADR 0024): here when this
//! node runs the agent's partition, else at the owner's API address as the lease table
//! gives it, and nowhere (a `not-owner` answer) while no node owns the partition.
//!
//! Pure: the lease table comes in as a snapshot; the API forwards what this decides. An
//! address is taken only from the table, never from a request, so a caller cannot make a
//! node send its token anywhere else.

use crate::core::ids::AgentId;
use crate::core::partition::{partition_of, LeaseView, PARTITIONS_COUNT};

/// What to do with a call for one agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// This node runs the agent's partition: answer here.
    Here,
    /// Another node owns it: send the call there.
    Forward { node: String, url: String },
    /// Another node owns it but published no API address (it serves none): it cannot be
    /// reached from here.
    NoAddress { node: String },
    /// No node owns it now (between owners, or this node's engine is still starting).
    NoOwner { partition: u32 },
}

/// The route of a call for `agent` on node `me`, which runs the partitions `held`.
pub fn route(agent: &AgentId, me: &str, held: impl Fn(u32) -> bool, table: &[LeaseView]) -> Route {
    let partition = partition_of(agent, PARTITIONS_COUNT);
    if held(partition) {
        return Route::Here;
    }
    let owner = table.iter().find(|lease| lease.partition == partition && !lease.expired);
    match owner.and_then(|lease| lease.owner.as_ref().map(|node| (node, lease.owner_url.as_ref()))) {
        // Owned by this node by the table but not running here yet: nobody answers now.
        Some((node, _)) if node == me => Route::NoOwner { partition },
        Some((node, Some(url))) => Route::Forward { node: node.clone(), url: url.clone() },
        Some((node, None)) => Route::NoAddress { node: node.clone() },
        None => Route::NoOwner { partition },
    }
}

/// The agent a path of the API is about: `/v1/agents/{agent}` and everything under it.
/// `None` for every other route (they are answered where they are asked).
pub fn agent_in_path(path: &str) -> Option<AgentId> {
    let rest = path.strip_prefix("/v1/agents/")?;
    let id = rest.split('/').next().unwrap_or_default();
    AgentId::new(id).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(id: &str) -> AgentId {
        AgentId::new(id).expect("valid")
    }

    fn lease(partition: u32, owner: Option<&str>, url: Option<&str>, expired: bool) -> LeaseView {
        LeaseView { partition, owner: owner.map(str::to_owned), owner_url: url.map(str::to_owned), term: 3, expired }
    }

    #[test]
    fn a_call_is_answered_where_the_agents_partition_runs() {
        // "ops" is in partition 6 of 16 (core::partition's vectors).
        let ops = agent("ops");
        let here = route(&ops, "a", |p| p == 6, &[lease(6, Some("a"), Some("http://a"), false)]);
        assert_eq!(here, Route::Here);
        let table = [lease(5, Some("a"), Some("http://a"), false), lease(6, Some("b"), Some("http://b:7"), false)];
        assert_eq!(route(&ops, "a", |p| p == 5, &table), Route::Forward { node: "b".into(), url: "http://b:7".into() });
        let no_address = [lease(6, Some("b"), None, false)];
        assert_eq!(route(&ops, "a", |_| false, &no_address), Route::NoAddress { node: "b".into() });
    }

    #[test]
    fn nobody_answers_for_an_expired_released_or_not_yet_started_partition() {
        let ops = agent("ops");
        for table in [
            vec![lease(6, Some("b"), Some("http://b"), true)],
            vec![lease(6, None, None, false)],
            vec![lease(6, Some("a"), Some("http://a"), false)],
            vec![],
        ] {
            assert_eq!(route(&ops, "a", |_| false, &table), Route::NoOwner { partition: 6 }, "{table:?}");
        }
    }

    #[test]
    fn only_agent_paths_name_an_agent() {
        assert_eq!(agent_in_path("/v1/agents/ops"), Some(agent("ops")));
        assert_eq!(agent_in_path("/v1/agents/ops/heartbeats/inbox/trigger"), Some(agent("ops")));
        for path in ["/v1/agents", "/v1/agents/", "/v1/status", "/v1/reload", "/v1/agents/Not Valid/x", "/"] {
            assert_eq!(agent_in_path(path), None, "{path}");
        }
    }
}
