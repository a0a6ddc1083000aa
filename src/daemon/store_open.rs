//! Opens the store a config names: the SQLite file, or PostgreSQL when `[store] url` is
//! set, with its password read from the environment at this moment (never the file).

use std::sync::Arc;

use crate::daemon::config::{Config, ConfigError, PostgresConfig, POSTGRES_PASSWORD_ENV_DEFAULT};
use crate::daemon::store_file;
use crate::daemon::DaemonError;
use crate::ports::leases::Leases;
use crate::ports::store::Store;
use crate::store::postgres::{NodeLock, PostgresStore, SessionSettings};
use crate::store::sqlite::SqliteStore;

/// # Errors
/// A config error for a wrong `store.path` or a missing password variable; a store error
/// when the database cannot be opened or migrated.
pub async fn open(config: &Config) -> Result<Arc<dyn Store>, DaemonError> {
    match &config.postgres {
        Some(postgres) => Ok(Arc::new(open_postgres(config, postgres).await?)),
        None => {
            store_file::check_path(config)?;
            Ok(Arc::new(SqliteStore::open(&config.store_path).await?))
        }
    }
}

/// What a daemon runs on: the store, the lease port when it is a node of a cluster, and
/// its hold on a PostgreSQL database (see `PostgresStore::hold_node_lock`).
pub struct DaemonStore {
    pub store: Arc<dyn Store>,
    pub leases: Option<Arc<dyn Leases>>,
    _node_lock: Option<NodeLock>,
}

/// Opens the store for `systole serve`: on PostgreSQL it also takes the database for a
/// single node, or a share of it for a node of a cluster.
///
/// # Errors
/// As [`open`], and when another daemon holds the database in the other mode.
pub async fn open_for_daemon(config: &Config) -> Result<DaemonStore, DaemonError> {
    let Some(postgres) = &config.postgres else {
        return Ok(DaemonStore { store: open(config).await?, leases: None, _node_lock: None });
    };
    let store = Arc::new(open_postgres(config, postgres).await?);
    let lock = store.hold_node_lock(config.cluster.is_some()).await?;
    let leases: Option<Arc<dyn Leases>> = match config.cluster {
        Some(_) => Some(Arc::clone(&store) as Arc<dyn Leases>),
        None => None,
    };
    Ok(DaemonStore { store, leases, _node_lock: Some(lock) })
}

/// Connects to the configured PostgreSQL database.
///
/// # Errors
/// As [`open`].
pub async fn open_postgres(config: &Config, postgres: &PostgresConfig) -> Result<PostgresStore, DaemonError> {
    let password = match &postgres.password_env {
        Some(name) => match std::env::var(name) {
            Ok(password) => Some(password),
            Err(_) => {
                return Err(DaemonError::Config(ConfigError {
                    file: config.file.display().to_string(),
                    field: "store.password_env".to_owned(),
                    problem: format!("names {name}, which is not set in the environment"),
                }))
            }
        },
        None => std::env::var(POSTGRES_PASSWORD_ENV_DEFAULT).ok(),
    };
    Ok(PostgresStore::connect_with(&postgres.url, password.as_deref(), &session_settings(config)).await?)
}

/// A node of a cluster names its sessions after itself, and has the database end any of
/// them left inside a transaction for a lease period (a node frozen mid-write), so the
/// locks it holds never keep another node from taking its partitions over (ADR 0018).
fn session_settings(config: &Config) -> SessionSettings {
    match &config.cluster {
        Some(cluster) => SessionSettings {
            application_name: format!("systole {}", cluster.node),
            idle_in_transaction: crate::cluster::idle_transaction_bound(cluster.lease),
        },
        None => SessionSettings::default(),
    }
}
