//! Opens the store a config names: the SQLite file, or PostgreSQL when `[store] url` is
//! set, with its password read from the environment at this moment (never the file).

use std::sync::Arc;

use crate::daemon::config::{Config, ConfigError, PostgresConfig, POSTGRES_PASSWORD_ENV_DEFAULT};
use crate::daemon::store_file;
use crate::daemon::DaemonError;
use crate::ports::store::Store;
use crate::store::postgres::PostgresStore;
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
    Ok(PostgresStore::connect(&postgres.url, password.as_deref()).await?)
}
