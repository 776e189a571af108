//! One request over the NATS client protocol, for the transfers only NATS carries (the
//! JetStream meta leader's stepdown), with the async-nats client. Credentials are the nats
//! CLI's variables: `NATS_CREDS` (a .creds file, or in a Secret its content), else `NATS_USER`
//! and `NATS_PASSWORD`, from a credentials Secret or file (`crate::credentials`) or the
//! environment; they are sent, never printed. The request must come from a user of the
//! system account: anyone else gets no reply at all, which is said as such.

use std::time::Duration;

use async_nats::ConnectOptions;
use serde_json::Value;

use crate::credentials::Vars;

/// What the server answered: accepted, or refused with its description.
pub async fn request(
    host: &str,
    port: u16,
    subject: &str,
    body: Option<&str>,
    limit: Duration,
    vars: &Vars,
) -> Result<(), String> {
    let options = options(limit, vars).await?;
    let addr = format!("nats://{host}:{port}");
    let client = tokio::time::timeout(limit, options.connect(addr.as_str()))
        .await
        .map_err(|_| format!("no NATS connection to {addr} within {limit:?}"))?
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    let payload = body.unwrap_or_default().to_string().into_bytes().into();
    let answer = client.request(subject.to_string(), payload).await;
    let _ = client.drain().await;
    let msg = answer.map_err(|e| match e.kind() {
        async_nats::RequestErrorKind::TimedOut => format!(
            "no reply to {subject} within {limit:?}: only users of the system account may move the meta leader (NATS_USER and NATS_PASSWORD, or NATS_CREDS, from {}, must name a system-account user)", vars.describe()
        ),
        async_nats::RequestErrorKind::NoResponders => format!(
            "no responders for {subject}: is JetStream enabled in this server's cluster, and is the user in the system account?"
        ),
        _ => format!("{subject}: {e}"),
    })?;
    judge_reply(&msg.payload)
}

/// The reply of a JetStream API request: `{"success": true}`, or an `error` with its
/// description and code.
pub fn judge_reply(payload: &[u8]) -> Result<(), String> {
    let v: Value = serde_json::from_slice(payload).map_err(|_| {
        format!(
            "the reply is not JSON: {}",
            String::from_utf8_lossy(&payload[..payload.len().min(200)])
        )
    })?;
    if v.pointer("/success") == Some(&Value::Bool(true)) {
        return Ok(());
    }
    match v.pointer("/error") {
        Some(e) => Err(format!(
            "refused the transfer: {} (err_code {})",
            e.pointer("/description")
                .and_then(Value::as_str)
                .unwrap_or("refused"),
            e.pointer("/err_code").map_or("?".into(), Value::to_string)
        )),
        None => Err(format!("an unexpected reply: {v}")),
    }
}

async fn options(limit: Duration, vars: &Vars) -> Result<ConnectOptions, String> {
    let base = match (vars.get("NATS_CREDS"), vars.get("NATS_USER")) {
        // A Secret holds the file's content; the environment, like the nats CLI, a path.
        (Some(creds), _) if creds.contains("BEGIN NATS USER JWT") => {
            ConnectOptions::with_credentials(&creds)
                .map_err(|e| format!("NATS_CREDS from {}: {e}", vars.describe()))?
        }
        (Some(path), _) => ConnectOptions::new()
            .credentials_file(&path)
            .await
            .map_err(|e| format!("cannot read NATS_CREDS {path}: {e}"))?,
        (None, Some(user)) => ConnectOptions::with_user_and_password(
            user,
            vars.get("NATS_PASSWORD").unwrap_or_default(),
        ),
        (None, None) => {
            return Err(
                "moving the NATS meta leader needs a system-account user: export NATS_USER and NATS_PASSWORD, or NATS_CREDS (the nats CLI's variables), or put them in a Secret named by --credentials-secret or the annotation kubectl-raft.io/credentials-secret"
                    .into(),
            )
        }
    };
    Ok(base
        .name("kubectl-raft")
        .connection_timeout(limit)
        .request_timeout(Some(limit))
        .max_reconnects(Some(0))
        .ignore_discovered_servers())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jetstream_replies_are_judged_by_success_and_error() {
        // As nats-server 2.15.2 answered in the test world (shared reference).
        let ok =
            br#"{"type":"io.nats.jetstream.api.v1.meta_leader_stepdown_response","success":true}"#;
        assert_eq!(judge_reply(ok), Ok(()));
        let unknown = br#"{"type":"io.nats.jetstream.api.v1.meta_leader_stepdown_response","error":{"code":400,"err_code":10005,"description":"preferred server \"nX\" not known"}}"#;
        assert_eq!(
            judge_reply(unknown),
            Err("refused the transfer: preferred server \"nX\" not known (err_code 10005)".into())
        );
        assert!(judge_reply(b"garbage").unwrap_err().contains("not JSON"));
    }
}
