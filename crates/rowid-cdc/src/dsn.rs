//! The connection string: one libpq-style DSN (`host=/tmp port=5432 dbname=app user=cdc`, or a
//! `postgresql://` URI) for both connections. The password, when there is one, is only ever
//! handed to the clients: never printed, logged or written to the state file.

use std::fmt;
use std::str::FromStr;

use pgwire_replication::ReplicationConfig;
use tokio_postgres::config::Host;

/// A parsed DSN.
#[derive(Clone)]
pub struct Dsn {
    config: tokio_postgres::Config,
}

impl fmt::Debug for Dsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Dsn({})", self.describe())
    }
}

/// The DSN could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadDsn(pub String);

impl fmt::Display for BadDsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "--dsn: {}", self.0)
    }
}

impl std::error::Error for BadDsn {}

impl FromStr for Dsn {
    type Err = BadDsn;

    fn from_str(s: &str) -> Result<Dsn, BadDsn> {
        let mut config = tokio_postgres::Config::from_str(s).map_err(|e| BadDsn(e.to_string()))?;
        if config.get_hosts().len() > 1 || config.get_ports().len() > 1 {
            return Err(BadDsn("give one host and one port".into()));
        }
        if config.get_hosts().is_empty() {
            config.host("/var/run/postgresql");
        }
        if config.get_user().is_none() {
            return Err(BadDsn("user= is missing".into()));
        }
        config.application_name("rowid-cdc");
        Ok(Dsn { config })
    }
}

impl Dsn {
    /// The configuration of the ordinary SQL connection.
    pub fn sql(&self) -> &tokio_postgres::Config {
        &self.config
    }

    fn host(&self) -> String {
        match self.config.get_hosts().first() {
            Some(Host::Tcp(h)) => h.clone(),
            Some(Host::Unix(p)) => p.display().to_string(),
            None => "/var/run/postgresql".into(),
        }
    }

    fn port(&self) -> u16 {
        self.config.get_ports().first().copied().unwrap_or(5432)
    }

    fn user(&self) -> &str {
        self.config.get_user().unwrap_or_default()
    }

    fn dbname(&self) -> &str {
        self.config.get_dbname().unwrap_or_else(|| self.user())
    }

    /// The replication connection for `slot` and `publication`.
    pub fn replication(&self, slot: &str, publication: &str) -> ReplicationConfig {
        let password = self
            .config
            .get_password()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .unwrap_or_default();
        let host = self.host();
        let config = if host.starts_with('/') {
            ReplicationConfig::unix(
                host,
                self.port(),
                self.user(),
                password,
                self.dbname(),
                slot,
                publication,
            )
        } else {
            ReplicationConfig::new(
                host,
                self.user(),
                password,
                self.dbname(),
                slot,
                publication,
            )
            .with_port(self.port())
        };
        config.with_binary(true).with_application_name("rowid-cdc")
    }

    /// `user@host:port/dbname`, for messages (never the password).
    pub fn describe(&self) -> String {
        format!(
            "{}@{}:{}/{}",
            self.user(),
            self.host(),
            self.port(),
            self.dbname()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dsns_parse_and_never_show_the_password() {
        let d: Dsn = "host=/tmp port=5499 dbname=app user=cdc password=s3cret"
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(d.describe(), "cdc@/tmp:5499/app");
        assert!(!format!("{d:?}").contains("s3cret"));
        let r = d.replication("s", "p");
        assert!(r.is_unix_socket());
        assert!(!r.display_connection().contains("s3cret"));
        let d: Dsn = "postgresql://cdc@db.example:6543/app"
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(d.describe(), "cdc@db.example:6543/app");
        assert!("host=/tmp dbname=app".parse::<Dsn>().is_err(), "no user");
        assert!("host=a,b user=x".parse::<Dsn>().is_err(), "two hosts");
        assert!("not a dsn ===".parse::<Dsn>().is_err());
    }
}
