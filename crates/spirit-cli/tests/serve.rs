//! `spirit serve` as a process: a crash-safe index written through `_bulk` is killed with `kill -9` at random
//! moments; after each restart every document whose bulk request was acknowledged is there, and a final
//! SIGTERM closes cleanly with `spirit check` passing.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn start(data: &Path) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_spirit"))
        .args(["serve", "--data", data.to_str().unwrap(), "--port", "0", "--durability", "crash-safe"])
        .args(["--dram-budget", "64MB"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"));
    (child, url.to_string())
}

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new().timeout(Duration::from_secs(60)).build()
}

#[test]
fn kill_9_during_bulk_loses_no_acknowledged_document() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut seed =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    eprintln!("serve kill -9 test seed {seed}");
    for round in 0..6 {
        let (mut child, url) = start(&data);
        // Everything acknowledged in earlier rounds survived the kill.
        let ids = acked.lock().unwrap().clone();
        if !ids.is_empty() {
            let a = agent();
            let count: serde_json::Value =
                a.get(&format!("{url}/k/_count")).call().unwrap().into_json().unwrap();
            assert!(
                count["count"].as_u64().unwrap() >= ids.len() as u64,
                "round {round}: {count} < {}",
                ids.len()
            );
            for id in ids.iter().step_by(7).chain(ids.last()) {
                let r = a.get(&format!("{url}/k/_doc/{id}")).call();
                assert!(r.is_ok(), "round {round}: acknowledged {id} lost: {:?}", r.err());
            }
        }
        let writer = {
            let (acked, url) = (acked.clone(), url.clone());
            std::thread::spawn(move || {
                let a = agent();
                for batch in 0.. {
                    let ids: Vec<String> = (0..40).map(|i| format!("r{round}-b{batch}-{i}")).collect();
                    let mut body = String::new();
                    for id in &ids {
                        body.push_str(&format!("{{\"index\":{{\"_id\":\"{id}\"}}}}\n{{\"body\":\"round {round} batch {batch} text\"}}\n"));
                    }
                    match a.post(&format!("{url}/k/_bulk")).send_string(&body) {
                        Ok(r) => {
                            let v: serde_json::Value = r.into_json().unwrap();
                            assert_eq!(v["errors"], serde_json::json!(false), "{v}");
                            acked.lock().unwrap().extend(ids);
                        }
                        Err(_) => return, // the server was killed
                    }
                }
            })
        };
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_millis(200 + seed % 800));
        assert!(Command::new("kill").args(["-KILL", &child.id().to_string()]).status().unwrap().success());
        child.wait().unwrap();
        writer.join().unwrap();
        eprintln!("round {round}: {} documents acknowledged so far", acked.lock().unwrap().len());
    }
    // A last start, then a graceful stop, and the data directory verifies.
    let (child, url) = start(&data);
    let ids = acked.lock().unwrap().clone();
    assert!(!ids.is_empty());
    let count: serde_json::Value =
        agent().get(&format!("{url}/k/_count")).call().unwrap().into_json().unwrap();
    assert!(count["count"].as_u64().unwrap() >= ids.len() as u64);
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("spirit: closed"));
    let check = Command::new(env!("CARGO_BIN_EXE_spirit"))
        .args(["check", "--data", data.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stdout));
}
