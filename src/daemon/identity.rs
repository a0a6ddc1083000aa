//! Which store a daemon serves, in one line both sides can compute from a config: the
//! daemon announces it, and the CLI sends what its own config names with every request
//! (`Systole-Store`), so a CLI pointed at one config never steers the daemon of another
//! that happens to answer the same address (issue 24).

use std::path::{Path, PathBuf};

use crate::daemon::config::Config;

/// `sqlite:/abs/path/systole.db`, or `postgres://user@host:5432/db` with `node NAME` on a
/// node of a cluster. Never holds a secret: a URL with a password is refused by the
/// config, and the query string (TLS settings) is left out.
pub fn store_identity(config: &Config) -> String {
    match &config.postgres {
        Some(postgres) => {
            let rest = postgres
                .url
                .strip_prefix("postgresql://")
                .or_else(|| postgres.url.strip_prefix("postgres://"))
                .unwrap_or(&postgres.url);
            let rest = rest.split('?').next().unwrap_or_default();
            match &config.cluster {
                Some(cluster) => format!("postgres://{rest} node {}", cluster.node),
                None => format!("postgres://{rest}"),
            }
        }
        None => format!("sqlite:{}", absolute(&config.store_path).display()),
    }
}

/// The path with symlinks and `..` resolved where the file exists (a running daemon's
/// file does), else made absolute as written.
fn absolute(path: &Path) -> PathBuf {
    if let Ok(real) = std::fs::canonicalize(path) {
        return real;
    }
    match (path.parent(), path.file_name()) {
        (Some(folder), Some(name)) if !folder.as_os_str().is_empty() => match std::fs::canonicalize(folder) {
            Ok(folder) => folder.join(name),
            Err(_) => std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()),
        },
        _ => std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str, file: &Path) -> Config {
        crate::daemon::config::parse(text, file).expect("valid config")
    }

    #[test]
    fn one_file_reached_two_ways_is_one_store_and_two_files_are_two() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("sub")).expect("sub");
        std::fs::write(dir.path().join("a.db"), "").expect("file");
        let llm = "[llm]\nprovider = \"scripted\"\n";
        let direct = config(&format!("[store]\npath = \"a.db\"\n{llm}"), &dir.path().join("one.toml"));
        let around = config(&format!("[store]\npath = \"../a.db\"\n{llm}"), &dir.path().join("sub/two.toml"));
        let other = config(&format!("[store]\npath = \"b.db\"\n{llm}"), &dir.path().join("one.toml"));
        assert_eq!(store_identity(&direct), store_identity(&around));
        assert_ne!(store_identity(&direct), store_identity(&other));
        assert!(store_identity(&other).starts_with("sqlite:/"), "{}", store_identity(&other));
    }

    #[test]
    fn a_postgres_store_is_named_without_query_and_with_the_node() {
        let text = "[store]\nurl = \"postgresql://systole@db:5432/systole?sslmode=require\"\n\
                    [cluster]\nnode_id = \"node-a\"\n[llm]\nprovider = \"scripted\"\n";
        let identity = store_identity(&config(text, Path::new("/etc/systole/a.toml")));
        assert_eq!(identity, "postgres://systole@db:5432/systole node node-a");
    }
}
