//! Readiness probes, as the kubelet's prober runs them: `tcpSocket`,
//! `httpGet` (plain HTTP) and `exec`, first after `initialDelaySeconds`,
//! then every `periodSeconds`, each bounded by `timeoutSeconds`; a
//! container turns Ready after `successThreshold` successes in a row and
//! stops being Ready after `failureThreshold` failures in a row. Liveness
//! and startup probes are not run.

use std::net::IpAddr;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::freeze::Freezer;
use super::runtime::Launch;

#[derive(Debug, Clone, PartialEq)]
pub enum Check {
    Tcp { port: u16 },
    Http { port: u16, path: String },
    Exec { command: Vec<String> },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    pub check: Check,
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

impl Probe {
    /// The container's readiness probe, if it has one; Err says why it
    /// cannot be run (an unknown named port, a gRPC or HTTPS probe).
    pub fn readiness(container: &Value) -> Result<Option<Probe>, String> {
        let spec = &container["readinessProbe"];
        if !spec.is_object() {
            return Ok(None);
        }
        let check = if spec["tcpSocket"].is_object() {
            Check::Tcp {
                port: port(container, &spec["tcpSocket"]["port"])?,
            }
        } else if spec["httpGet"].is_object() {
            let get = &spec["httpGet"];
            if get["scheme"]
                .as_str()
                .is_some_and(|s| s.eq_ignore_ascii_case("https"))
            {
                return Err("kube-sandbox runs httpGet probes over plain HTTP only".into());
            }
            Check::Http {
                port: port(container, &get["port"])?,
                path: get["path"].as_str().unwrap_or("/").to_string(),
            }
        } else if let Some(command) = spec["exec"]["command"].as_array() {
            Check::Exec {
                command: command
                    .iter()
                    .filter_map(|c| c.as_str().map(str::to_string))
                    .collect(),
            }
        } else {
            return Err("kube-sandbox runs tcpSocket, httpGet and exec probes only".into());
        };
        let seconds =
            |key: &str, default: u64| Duration::from_secs(spec[key].as_u64().unwrap_or(default));
        let count =
            |key: &str, default: u32| spec[key].as_u64().map_or(default, |n| n.max(1) as u32);
        Ok(Some(Probe {
            check,
            initial_delay: seconds("initialDelaySeconds", 0),
            period: seconds("periodSeconds", 10).max(Duration::from_secs(1)),
            timeout: seconds("timeoutSeconds", 1).max(Duration::from_secs(1)),
            success_threshold: count("successThreshold", 1),
            failure_threshold: count("failureThreshold", 3),
        }))
    }
}

/// A probe's port: a number, or the name of one of the container's ports.
fn port(container: &Value, port: &Value) -> Result<u16, String> {
    let number = match port {
        Value::Number(n) => n.as_u64(),
        Value::String(name) => container["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == *port)
            .and_then(|p| p["containerPort"].as_u64())
            .or_else(|| name.parse().ok()),
        _ => None,
    };
    number
        .and_then(|n| u16::try_from(n).ok())
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("readiness probe port {port} is not a port of the container"))
}

/// Runs the check once; Err carries the failure as the Unhealthy event
/// says it. An exec check's process starts through the `freezer`, as
/// the container's own: it waits while the container's volumes are
/// frozen, and is stopped with them.
pub async fn run(
    check: &Check,
    ip: IpAddr,
    exec: &Launch,
    freezer: &Freezer,
) -> Result<(), String> {
    match check {
        Check::Tcp { port } => TcpStream::connect((ip, *port))
            .await
            .map(drop)
            .map_err(|e| format!("dial tcp {ip}:{port}: connect: {e}")),
        Check::Http { port, path } => http_get(ip, *port, path).await,
        Check::Exec { .. } => {
            let (mut process, registered) = freezer.spawn(exec).await.map_err(|e| e.to_string())?;
            let exit = process.wait().await;
            drop(registered);
            if exit.code == 0 {
                Ok(())
            } else {
                Err(format!("command exited with {}", exit.code))
            }
        }
    }
}

async fn http_get(ip: IpAddr, port: u16, path: &str) -> Result<(), String> {
    let url = format!("http://{ip}:{port}{path}");
    let mut conn = TcpStream::connect((ip, port))
        .await
        .map_err(|e| format!("Get \"{url}\": dial tcp {ip}:{port}: connect: {e}"))?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {ip}:{port}\r\nUser-Agent: kube-probe/1.33\r\nConnection: close\r\n\r\n");
    conn.write_all(request.as_bytes())
        .await
        .map_err(|e| format!("Get \"{url}\": {e}"))?;
    let mut head = [0u8; 64];
    let n = conn
        .read(&mut head)
        .await
        .map_err(|e| format!("Get \"{url}\": {e}"))?;
    let line = String::from_utf8_lossy(&head[..n]);
    let code: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("Get \"{url}\": malformed HTTP response"))?;
    if (200..400).contains(&code) {
        Ok(())
    } else {
        Err(format!("HTTP probe failed with statuscode: {code}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn probes_read_like_the_kubelet() {
        let c = json!({"ports": [{"name": "data", "containerPort": 7000}],
            "readinessProbe": {"tcpSocket": {"port": "data"}, "periodSeconds": 2}});
        let probe = Probe::readiness(&c).expect("valid").expect("a probe");
        assert_eq!(probe.check, Check::Tcp { port: 7000 });
        assert_eq!(
            (probe.period, probe.timeout, probe.failure_threshold),
            (Duration::from_secs(2), Duration::from_secs(1), 3)
        );
        let http = json!({"readinessProbe": {"httpGet": {"port": 8080, "path": "/healthz"}}});
        assert_eq!(
            Probe::readiness(&http).expect("valid").map(|p| p.check),
            Some(Check::Http {
                port: 8080,
                path: "/healthz".into()
            })
        );
        assert_eq!(Probe::readiness(&json!({})), Ok(None));
        assert!(
            Probe::readiness(&json!({"readinessProbe": {"tcpSocket": {"port": "nope"}}})).is_err()
        );
        assert!(Probe::readiness(&json!({"readinessProbe": {"grpc": {"port": 9}}})).is_err());
    }

    #[tokio::test]
    async fn tcp_and_http_checks_see_listeners() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((mut c, _)) = listener.accept().await {
                let mut buf = [0u8; 256];
                let _ = c.read(&mut buf).await;
                let _ = c
                    .write_all(b"HTTP/1.1 503 Service Unavailable\r\n\r\n")
                    .await;
            }
        });
        let ip: IpAddr = "127.0.0.1".parse().expect("ip");
        let none = Launch {
            argv: Vec::new(),
            env: Vec::new(),
            working_dir: None,
            mounts: Vec::new(),
            watched: Vec::new(),
            image_root: None,
            scratch_dir: std::env::temp_dir(),
            log_path: "/dev/null".into(),
            identity: crate::kubelet::runtime::Identity::root(),
        };
        let freezer = Freezer::default();
        assert_eq!(run(&Check::Tcp { port }, ip, &none, &freezer).await, Ok(()));
        let http = run(
            &Check::Http {
                port,
                path: "/".into(),
            },
            ip,
            &none,
            &freezer,
        )
        .await;
        assert_eq!(
            http,
            Err("HTTP probe failed with statuscode: 503".to_string())
        );
    }
}
