//! Decentralized NATS authentication for the tests, made without `nsc`: an operator, a system
//! account and an account with JetStream (their JWTs preloaded into the server's memory
//! resolver), and a user of that account in a `.creds` file (its JWT and its NKey seed), the
//! file `--nats-creds` takes. JWTs are signed by their issuer's NKey (ed25519, the
//! `ed25519-nkey` algorithm: the signature covers `header.claims`, each base64url).

use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use nkeys::KeyPair;
use serde_json::{Value, json};

/// The server's configuration (operator mode) and the users' credentials files.
pub struct Operator {
    /// A `nats-server` configuration file trusting the operator.
    pub config: PathBuf,
    /// A user of the JetStream account.
    pub creds: PathBuf,
    /// A user signed by an account the operator never issued.
    pub stranger_creds: PathBuf,
    /// The user's NKey seed (it must never be printed).
    pub seed: String,
}

/// `issuer`'s JWT of `claims` (`nats` part) for `subject`.
fn jwt(issuer: &KeyPair, subject: &str, name: &str, nats: Value) -> String {
    let header = json!({"typ": "JWT", "alg": "ed25519-nkey"});
    let claims = json!({
        "jti": format!("{name}-{subject}"),
        "iat": 1_700_000_000,
        "iss": issuer.public_key(),
        "name": name,
        "sub": subject,
        "nats": nats,
    });
    let signed = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let signature = issuer.sign(signed.as_bytes()).unwrap();
    format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature))
}

/// An account's JWT issued by `operator`, with JetStream when `jetstream`.
fn account(operator: &KeyPair, account: &KeyPair, name: &str, jetstream: bool) -> String {
    let storage = if jetstream { -1 } else { 0 };
    jwt(
        operator,
        &account.public_key(),
        name,
        json!({
            "limits": {
                "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
                "wildcards": true, "conn": -1, "leaf": -1,
                "mem_storage": storage, "disk_storage": storage, "streams": -1, "consumer": -1,
            },
            "default_permissions": {"pub": {}, "sub": {}},
            "type": "account",
            "version": 2,
        }),
    )
}

/// A credentials file for a new user of `account`.
fn user_creds(account: &KeyPair, path: &Path) -> String {
    let user = KeyPair::new_user();
    let token = jwt(
        account,
        &user.public_key(),
        "rowid-cdc",
        json!({
            "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1,
            "type": "user", "version": 2,
        }),
    );
    let seed = user.seed().unwrap();
    std::fs::write(
        path,
        format!(
            "-----BEGIN NATS USER JWT-----\n{token}\n------END NATS USER JWT------\n\n\
             -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n"
        ),
    )
    .unwrap();
    seed
}

/// An operator, its accounts and users, written under `dir`.
pub fn operator(dir: &Path) -> Operator {
    let operator = KeyPair::new_operator();
    let system = KeyPair::new_account();
    let app = KeyPair::new_account();
    let operator_jwt = jwt(
        &operator,
        &operator.public_key(),
        "rowid-test",
        json!({"type": "operator", "version": 2}),
    );
    let config = dir.join("operator.conf");
    std::fs::write(
        &config,
        format!(
            "operator: {operator_jwt}\n\
             system_account: {sys}\n\
             resolver: MEMORY\n\
             resolver_preload: {{\n  {sys}: {sys_jwt}\n  {app}: {app_jwt}\n}}\n",
            sys = system.public_key(),
            sys_jwt = account(&operator, &system, "SYS", false),
            app = app.public_key(),
            app_jwt = account(&operator, &app, "APP", true),
        ),
    )
    .unwrap();
    let creds = dir.join("user.creds");
    let seed = user_creds(&app, &creds);
    let stranger_creds = dir.join("stranger.creds");
    user_creds(&KeyPair::new_account(), &stranger_creds);
    Operator {
        config,
        creds,
        stranger_creds,
        seed,
    }
}
