//! Changes to a running engine: written to the store first, then applied by the driver,
//! and only then acknowledged. Shared by [`EngineHandle`](crate::driver::EngineHandle)
//! and the agent's tools, so a change a model makes takes effect exactly like an API call.

use std::collections::BTreeSet;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::core::heartbeat::{Heartbeat, HeartbeatDef};
use crate::core::ids::{AgentId, HeartbeatKey};
use crate::core::pause::Pause;
use crate::driver::engine::{Change, Command};
use crate::driver::EngineError;
use crate::ports::clock::Clock;
use crate::ports::store::{SeedReport, Store};

#[derive(Clone)]
pub struct Control {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    commands: mpsc::Sender<Command>,
}

impl Control {
    pub(crate) fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>, commands: mpsc::Sender<Command>) -> Self {
        Self { store, clock, commands }
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Creates or replaces a heartbeat; it waits one full interval.
    ///
    /// # Errors
    /// When the store write fails (nothing changed) or the engine has stopped.
    pub async fn upsert(&self, def: HeartbeatDef) -> Result<(), EngineError> {
        self.store.put_heartbeat(&def, self.clock.wall()).await?;
        self.send(Change::Upsert(Box::new(def))).await
    }

    /// Deletes a heartbeat; it never fires again. Returns whether it existed.
    ///
    /// # Errors
    /// When the store write fails (nothing changed) or the engine has stopped.
    pub async fn delete(&self, key: &HeartbeatKey) -> Result<bool, EngineError> {
        let existed = self.store.delete_heartbeat(key).await?;
        self.send(Change::Delete(key.clone())).await?;
        Ok(existed)
    }

    /// Enables (clearing the breaker) or disables a heartbeat. Returns whether it existed.
    ///
    /// # Errors
    /// When the store write fails (nothing changed) or the engine has stopped.
    pub async fn set_enabled(&self, key: &HeartbeatKey, enabled: bool) -> Result<bool, EngineError> {
        let reason = (!enabled).then_some("user");
        let existed = self.store.set_enabled(key, enabled, reason).await?;
        self.send(Change::SetEnabled(key.clone(), enabled)).await?;
        Ok(existed)
    }

    /// Pauses the agent's timed heartbeats for `minutes` from now. Durable before it returns.
    ///
    /// # Errors
    /// When the store write fails (no pause) or the engine has stopped.
    pub async fn pause(&self, agent: &AgentId, minutes: u32) -> Result<Pause, EngineError> {
        let pause = Pause::start(self.clock.now(), minutes);
        self.store.set_pause(agent, &pause.record).await?;
        self.send(Change::Pause(agent.clone(), pause)).await?;
        Ok(pause)
    }

    /// Ends the agent's pause now. Returns whether one was stored.
    ///
    /// # Errors
    /// When the store write fails (the pause stays) or the engine has stopped.
    pub async fn resume(&self, agent: &AgentId) -> Result<bool, EngineError> {
        let stored = self.store.load_pauses().await?.iter().any(|(paused, _)| paused == agent);
        self.store.clear_pause(agent).await?;
        self.send(Change::Resume(agent.clone())).await?;
        Ok(stored)
    }

    /// Seeds `defs` as the config's heartbeats (see [`Store::seed_config`]) and applies the
    /// outcome to the running schedule: new and changed ones are (re-)armed, removed ones
    /// stop, unchanged ones keep their timers and slots. What a config reload does.
    ///
    /// # Errors
    /// When the store write fails (nothing changed) or the engine has stopped.
    pub async fn reseed(&self, defs: &[HeartbeatDef]) -> Result<SeedReport, EngineError> {
        let report = self.store.seed_config(defs, self.clock.wall()).await?;
        self.apply_seeded(defs, &report).await?;
        Ok(report)
    }

    /// Applies what this engine's own seed wrote (fresh rows): the inserted and updated
    /// definitions of `report` found in `defs`, and the removed ones.
    async fn apply_seeded(&self, defs: &[HeartbeatDef], report: &SeedReport) -> Result<(), EngineError> {
        for key in report.inserted.iter().chain(&report.updated) {
            if let Some(def) = defs.iter().find(|def| def.key == *key) {
                self.send(Change::Upsert(Box::new(def.clone()))).await?;
            }
        }
        for key in &report.removed {
            self.send(Change::Delete(key.clone())).await?;
        }
        Ok(())
    }

    /// Runs the heartbeats as the store now holds them, definition and state, as a
    /// partition's engine loads them at its start, and stops `removed`. A reload on a node of
    /// a cluster seeds once, then each partition's engine takes its changed rows: one whose
    /// definition another node had already seeded keeps the state the store kept for it (an
    /// open breaker, a backoff), which an upsert would take for a fresh one.
    pub async fn adopt_stored(&self, heartbeats: Vec<Heartbeat>, removed: &[HeartbeatKey]) -> Result<(), EngineError> {
        if !heartbeats.is_empty() {
            self.send(Change::Adopt(heartbeats)).await?;
        }
        for key in removed {
            self.send(Change::Delete(key.clone())).await?;
        }
        Ok(())
    }

    /// Adopts each of `heartbeats` (rows the store holds) whose heartbeat the driver arms
    /// otherwise, or not at all; the rest keep their timers.
    pub async fn adopt_changed(&self, heartbeats: Vec<Heartbeat>) -> Result<(), EngineError> {
        self.send(Change::AdoptChanged(heartbeats)).await
    }

    /// Stops every heartbeat seeded from a config file that `in_file` (the reloaded file's
    /// heartbeats) lacks, as the store's seed removed it; those created at run time stay.
    /// A reload's own diff names only what the file it last applied had: a heartbeat a
    /// partition took from the store since (a reload this node missed) needs this.
    pub async fn keep_config_only(&self, in_file: BTreeSet<HeartbeatKey>) -> Result<(), EngineError> {
        self.send(Change::KeepConfigOnly(in_file)).await
    }

    /// Sends a change and waits until the driver has applied it.
    async fn send(&self, change: Change) -> Result<(), EngineError> {
        let (applied, done) = oneshot::channel();
        self.commands.send(Command::Change { change, applied }).await.map_err(|_| EngineError::Stopped)?;
        done.await.map_err(|_| EngineError::Stopped)
    }
}

#[async_trait::async_trait]
impl crate::agent::tools::JobControl for Control {
    fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    async fn upsert(&self, def: HeartbeatDef) -> Result<(), String> {
        Control::upsert(self, def).await.map_err(|error| error.to_string())
    }

    async fn delete(&self, key: &HeartbeatKey) -> Result<bool, String> {
        Control::delete(self, key).await.map_err(|error| error.to_string())
    }

    async fn set_enabled(&self, key: &HeartbeatKey, enabled: bool) -> Result<bool, String> {
        Control::set_enabled(self, key, enabled).await.map_err(|error| error.to_string())
    }

    async fn pause(&self, agent: &AgentId, minutes: u32) -> Result<Pause, String> {
        Control::pause(self, agent, minutes).await.map_err(|error| error.to_string())
    }
}
