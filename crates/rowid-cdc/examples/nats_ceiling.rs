//! How fast `async-nats` alone publishes messages shaped like rowid-cdc's into a JetStream
//! stream (no PostgreSQL, no decoding): the ceiling the NATS sink is measured against in
//! bench 9. Publishes N messages of about 300 bytes with the sink's headers and message ids,
//! WINDOW acknowledgements in flight at most, then awaits the rest; prints messages per second.
//!
//! ```text
//! cargo run --release -p rowid-cdc --example nats_ceiling -- nats://127.0.0.1:4222 STREAM SUBJECT REPLICAS N WINDOW
//! ```
//!
//! The stream is created (on `SUBJECT`, with `REPLICAS`) when missing.

use std::collections::VecDeque;
use std::process::ExitCode;
use std::time::Instant;

use bytes::Bytes;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, stream, subject, replicas, n, window] = args.as_slice() else {
        eprintln!("usage: nats_ceiling URL STREAM SUBJECT REPLICAS N WINDOW");
        return ExitCode::FAILURE;
    };
    let (Ok(replicas), Ok(n), Ok(window)) = (
        replicas.parse::<usize>(),
        n.parse::<u64>(),
        window.parse::<usize>(),
    ) else {
        eprintln!("nats_ceiling: REPLICAS, N and WINDOW are numbers");
        return ExitCode::FAILURE;
    };
    // Single-threaded, as the sink's thread is.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("nats_ceiling: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(publish(url, stream, subject, replicas, n, window)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nats_ceiling: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn publish(
    url: &str,
    stream: &str,
    subject: &str,
    replicas: usize,
    n: u64,
    window: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let servers = url
        .split(',')
        .map(str::parse)
        .collect::<Result<Vec<async_nats::ServerAddr>, _>>()?;
    let client = async_nats::connect(servers).await?;
    let js = async_nats::jetstream::new(client);
    js.get_or_create_stream(async_nats::jetstream::stream::Config {
        name: stream.to_string(),
        subjects: vec![subject.to_string()],
        num_replicas: replicas,
        ..Default::default()
    })
    .await?;
    let started = Instant::now();
    let mut pending = VecDeque::new();
    for seq in 0..n {
        let body = format!(
            "{{\"lsn\":\"0/1A2B3C4D\",\"commit_lsn\":\"0/1A2B3C4D\",\"xid\":7431,\"op\":\"update\",\
             \"relation\":\"public.t\",\"old_identity\":null,\"new_identity\":\"0a0180000000000{seq:06}\",\
             \"new\":{{\"id\":\"{seq}\",\"v\":1}},\"seq\":{seq}}}"
        );
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", format!("{stream}:1A2B3C4D:{seq}").as_str());
        headers.insert("Rowid-Relation", "public.t");
        headers.insert("Rowid-Op", "update");
        headers.insert("Rowid-Commit-Lsn", "0/1A2B3C4D");
        headers.insert(
            "Rowid-Identity",
            format!("0a0180000000000{seq:06}").as_str(),
        );
        let ack = js
            .publish_with_headers(subject.to_string(), headers, Bytes::from(body))
            .await?;
        pending.push_back(ack);
        if pending.len() > window
            && let Some(oldest) = pending.pop_front()
        {
            oldest.await?;
        }
    }
    for ack in pending {
        ack.await?;
    }
    let s = started.elapsed().as_secs_f64();
    println!("{n} messages in {s:.2} s: {:.0}/s", n as f64 / s);
    Ok(())
}
