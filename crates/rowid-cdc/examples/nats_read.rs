//! Reads back what `rowid-cdc --sink nats:URL` wrote: every message of a JetStream stream on
//! a change subject (the slot's markers left out), in stream order, with its subject and
//! headers, one JSON object per line.
//!
//! ```text
//! cargo run -p rowid-cdc --example nats_read -- nats://127.0.0.1:4222 ROWID_CDC rowid_cdc
//! ```
//!
//! Arguments: the server's URL, the stream, the subject prefix (`--nats-subject-prefix`).
//! Credentials as rowid-cdc takes them: `ROWID_CDC_NATS_USER` / `ROWID_CDC_NATS_PASSWORD`,
//! or `ROWID_CDC_NATS_TOKEN`.

use std::process::ExitCode;

use async_nats::jetstream::consumer::pull::OrderedConfig;
use futures_util::StreamExt;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, stream, prefix] = args.as_slice() else {
        eprintln!("usage: nats_read URL STREAM SUBJECT_PREFIX");
        return ExitCode::FAILURE;
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("nats_read: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(read(url, stream, prefix)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nats_read: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn read(url: &str, name: &str, prefix: &str) -> Result<(), Box<dyn std::error::Error>> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let mut options = async_nats::ConnectOptions::new();
    if let Some(token) = env("ROWID_CDC_NATS_TOKEN") {
        options = options.token(token);
    }
    if let Some(user) = env("ROWID_CDC_NATS_USER") {
        options =
            options.user_and_password(user, env("ROWID_CDC_NATS_PASSWORD").unwrap_or_default());
    }
    let js = async_nats::jetstream::new(options.connect(url).await?);
    let mut stream = js.get_stream(name).await?;
    let count = stream.info().await?.state.messages;
    let consumer = stream.create_consumer(OrderedConfig::default()).await?;
    let mut messages = consumer.messages().await?;
    let markers = format!("{prefix}._slot.");
    for _ in 0..count {
        let Some(m) = messages.next().await else {
            break;
        };
        let m = m?.message;
        if m.subject.starts_with(&markers) {
            continue;
        }
        let headers: serde_json::Map<String, serde_json::Value> = m
            .headers
            .iter()
            .flat_map(|h| h.iter())
            .map(|(k, v)| (k.to_string(), serde_json::Value::from(v[0].to_string())))
            .collect();
        let body: serde_json::Value = serde_json::from_slice(&m.payload)?;
        println!(
            "{}",
            serde_json::json!({"subject": m.subject.to_string(), "headers": headers, "body": body})
        );
    }
    Ok(())
}
