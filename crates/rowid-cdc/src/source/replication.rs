//! The replication connection's settings from the connection string: the same server, role,
//! database and TLS as the SQL connection, both publications (the user's and the one that
//! carries the identity schema table), binary values, and the password only when it cannot
//! travel in clear text (see [`crate::connect::net::Session::password_safe`]).

use pgwire_replication::ReplicationConfig;
use rowid_registry::schema_message::IDENTITY_PUBLICATION;

use crate::config::Options;
use crate::connect::conninfo::{Conninfo, Host};
use crate::connect::net::{Auth, Session};
use crate::connect::tls;
use crate::error::{CdcError, setup};
use crate::lsn::Lsn;

/// The replication connection for the slot and publication of `opts`, resuming at `start`,
/// given what the SQL connection to the same server showed (`seen`).
pub fn config(opts: &Options, seen: &Session, start: Lsn) -> Result<ReplicationConfig, CdcError> {
    settings(&opts.dsn, seen, &opts.slot, &opts.publication)
        .map(|c| c.with_start_lsn(pgwire_replication::Lsn::from_u64(start.0)))
        .map_err(setup)
}

fn settings(
    info: &Conninfo,
    seen: &Session,
    slot: &str,
    publication: &str,
) -> Result<ReplicationConfig, String> {
    if seen.auth == Auth::Md5 {
        return Err(format!(
            "{} authenticates {} with md5, which the replication client does not support: use \
             scram-sha-256 in pg_hba.conf",
            info.describe(),
            info.user
        ));
    }
    // Given only when the server was seen to take it by SCRAM or over TLS: the replication
    // client would answer a clear-text request with it.
    let password = match (&info.password, seen.password_safe()) {
        (Some(p), true) => p.expose().to_string(),
        _ => String::new(),
    };
    let publications = vec![publication.to_string(), IDENTITY_PUBLICATION.to_string()];
    let config = match (&info.host, info.tcp_target()) {
        (Host::Unix(dir), None) => ReplicationConfig::unix(
            dir.display().to_string(),
            info.port,
            info.user.as_str(),
            password,
            info.dbname.as_str(),
            slot,
            publications,
        ),
        (_, target) => ReplicationConfig::new(
            target.unwrap_or_default(),
            info.user.as_str(),
            password,
            info.dbname.as_str(),
            slot,
            publications,
        )
        .with_port(info.port)
        .with_tls(tls::replication_tls(info, &seen.certificate_names)?),
    };
    let config = config.with_binary(true).with_application_name("rowid-cdc");
    Ok(match &info.options {
        Some(o) => config.with_options(o.as_str()),
        None => config,
    })
}
