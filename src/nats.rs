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
use crate::model::text::message;

/// Whose credentials a request is sent with: the system account's (the meta leader), or an
/// account's own (its streams and consumers: NATS answers those only in their account).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Who {
    System,
    Account(String),
}

impl Who {
    /// The prefix of the variables: NATS (NATS_USER, ...) or NATS_<ACCOUNT> (NATS_APP_USER).
    pub fn prefix(&self) -> String {
        match self {
            Who::System => "NATS".into(),
            Who::Account(a) => format!("NATS_{}", account_var(a)),
        }
    }
}

/// An account name as it appears in a variable's name: upper case, anything but letters and
/// digits as `_` (APP → APP, team-a → TEAM_A).
pub fn account_var(account: &str) -> String {
    account
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// TLS for one NATS connection: the cluster's (`crate::tls::Tls`), verifying the member by
/// its `names` whatever address the connection dials (a port-forward's 127.0.0.1 included).
/// `required` when the cluster is read over HTTPS (one `tls {}` block serves NATS's
/// monitoring port and its client port) or has a CA to verify its servers with: then the
/// connection is TLS or nothing, whatever the answering server's INFO says, so a password is
/// never sent in the clear to whoever answers at the address. Otherwise the server's INFO
/// decides, and a server that asks for TLS is trusted by no CA (none was given): refused
/// with what to give, never trusted through the machine's public roots.
pub struct NatsTls<'a> {
    pub tls: &'a crate::tls::Tls,
    pub names: Vec<String>,
    pub required: bool,
}

impl<'a> NatsTls<'a> {
    /// The cluster's TLS for the member at `ep` (the endpoint of its client port).
    pub fn to(tls: &'a crate::tls::Tls, ep: &crate::model::Endpoint) -> Self {
        NatsTls {
            tls,
            names: ep.names.clone(),
            required: ep.scheme == crate::model::Scheme::Https || tls.verifies(),
        }
    }
}

/// A connection to one server, as `who`, over TLS where `tls` says.
pub async fn connect(
    host: &str,
    port: u16,
    limit: Duration,
    vars: &Vars,
    who: &Who,
    tls: &NatsTls<'_>,
) -> Result<async_nats::Client, ConnectError> {
    let mut options = options(limit, vars, who)
        .await
        .map_err(ConnectError::Refused)?;
    let mut asked = None;
    match tls.tls.client_config(&tls.names) {
        Ok((config, _, a)) => {
            options = options.tls_client_config(config).require_tls(tls.required);
            asked = Some(a);
        }
        // No CA and no --tls-skip-verify: nothing to verify a server with. Where TLS is
        // known to be needed that is the answer; elsewhere the connection stays plain, and a
        // server that asks for TLS is trusted by no CA.
        Err(e) if tls.required => return Err(ConnectError::Tls(e)),
        Err(_) => {
            options =
                options.tls_client_config(tls.tls.trusting_none().map_err(ConnectError::Tls)?);
        }
    }
    // An IPv6 pod IP (--via direct on a dual-stack or IPv6 cluster) in brackets.
    let addr = if host.contains(':') {
        format!("nats://[{host}]:{port}")
    } else {
        format!("nats://{host}:{port}")
    };
    tokio::time::timeout(limit, options.connect(addr.as_str()))
        .await
        .map_err(|_| {
            ConnectError::Unreachable(format!("no NATS connection to {addr} within {limit:?}"))
        })?
        .map_err(|e| ConnectError::of(&addr, &e, tls.tls, asked.as_ref()))
}

/// Why no NATS connection was made, as the callers branch on it: the user (its credentials
/// unusable, or refused by the server) is an answer about the user; TLS's failure is one
/// about the cluster's TLS; no connection says nothing about either.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectError {
    /// The credentials could not be used (missing, not a .creds file, unreadable), or the
    /// server refused them (an authorization violation, a nonce it could not verify).
    Refused(String),
    /// TLS failed, said as what it is (unknown CA, a client certificate required, ...) with
    /// what to do.
    Tls(String),
    /// No connection: no route, a timeout, I/O.
    Unreachable(String),
}

impl ConnectError {
    fn of(
        addr: &str,
        e: &async_nats::ConnectError,
        tls: &crate::tls::Tls,
        asked: Option<&crate::tls::CertAsked>,
    ) -> Self {
        use async_nats::ConnectErrorKind as K;
        if let Some(m) = tls.explain(e) {
            return ConnectError::Tls(format!("cannot connect to {addr}: {m}"));
        }
        // A server that asked for a client certificate and closed the connection before its
        // INFO's answer refused the certificate (TLS 1.3 says so after the client's side of
        // the handshake: the close can overtake the alert).
        // (A server's own -ERR, "maximum connections exceeded" and the like, came after a
        // handshake that went through: not that.)
        let server_said = std::error::Error::source(e)
            .is_some_and(|s| s.downcast_ref::<async_nats::ServerError>().is_some());
        if asked.is_some_and(crate::tls::CertAsked::get)
            && matches!(e.kind(), K::Io | K::Tls)
            && !server_said
        {
            return ConnectError::Tls(format!(
                "cannot connect to {addr}: {}",
                tls.closed_after_asking()
            ));
        }
        let why = format!("cannot connect to {addr}: {e}");
        match e.kind() {
            K::AuthorizationViolation | K::Authentication => ConnectError::Refused(why),
            _ => ConnectError::Unreachable(why),
        }
    }
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Refused(why)
            | ConnectError::Tls(why)
            | ConnectError::Unreachable(why) => f.write_str(why),
        }
    }
}

impl From<ConnectError> for String {
    fn from(e: ConnectError) -> String {
        e.to_string()
    }
}

/// What the server answered: accepted, or refused with its description.
pub async fn request(
    (host, port): (&str, u16),
    subject: &str,
    body: Option<&str>,
    limit: Duration,
    vars: &Vars,
    tls: &NatsTls<'_>,
) -> Result<(), String> {
    let client = connect(host, port, limit, vars, &Who::System, tls).await?;
    let answer = ask(&client, subject, body, limit, vars, &Who::System).await;
    let _ = client.drain().await;
    answer.map_err(String::from)
}

/// Why a request came to nothing. Typed: a JetStream group's stepdown is answered by the
/// group's leader only, so nobody answers while the group elects one (for a moment after
/// any stepdown or restart), nor a user of another account; the caller tells these apart
/// by asking the server's own list of groups (`plan::groups::after_unanswered`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AskError {
    /// No reply within the limit: what was not answered ("no reply to SUBJECT within 2s"),
    /// and the likeliest cause when nothing else explains it (the user).
    Unanswered { what: String, hint: String },
    /// A member of the group answered that it has no leader now (err_code 10008, "JetStream
    /// system temporarily unavailable": what a group's other members say while it elects).
    NoLeader(String),
    /// A reply that refuses, or a request that could not be sent.
    Failed(String),
}

/// The err_code of "JetStream system temporarily unavailable": a group member that knows no
/// leader, or a server whose meta group has none.
pub const NO_LEADER_ERR_CODE: u64 = 10008;

impl std::fmt::Display for AskError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AskError::Unanswered { what, hint } => write!(f, "{what}: {hint}"),
            AskError::NoLeader(why) | AskError::Failed(why) => f.write_str(why),
        }
    }
}

impl From<AskError> for String {
    fn from(e: AskError) -> String {
        e.to_string()
    }
}

/// One request on an open connection, judged as a JetStream API reply.
pub async fn ask(
    client: &async_nats::Client,
    subject: &str,
    body: Option<&str>,
    limit: Duration,
    vars: &Vars,
    who: &Who,
) -> Result<(), AskError> {
    let payload = body.unwrap_or_default().to_string().into_bytes().into();
    let asked = tokio::time::Instant::now();
    let answer = tokio::time::timeout(limit, client.request(subject.to_string(), payload))
        .await
        .unwrap_or_else(|_| Err(async_nats::RequestErrorKind::TimedOut.into()));
    // At -v=6: the subject and how it ended, never the connection's user or password.
    tracing::trace!(
        target: crate::verbose::REQUESTS,
        "NATS request {subject} {} in {} ms",
        if answer.is_ok() { "answered" } else { "failed" },
        asked.elapsed().as_millis()
    );
    let msg = answer.map_err(|e| match (e.kind(), who) {
        (async_nats::RequestErrorKind::TimedOut, Who::System) => AskError::Unanswered {
            what: format!("no reply to {subject} within {limit:?}"),
            hint: format!("only users of the system account may move the meta leader (NATS_USER and NATS_PASSWORD, or NATS_CREDS, from {}, must name a system-account user)", vars.describe()),
        },
        (async_nats::RequestErrorKind::TimedOut, Who::Account(a)) => AskError::Unanswered {
            what: format!("no reply to {subject} within {limit:?}"),
            hint: format!("is {p}_USER (or {p}_CREDS) a user of account {a} who may publish to it?", p = who.prefix()),
        },
        (async_nats::RequestErrorKind::NoResponders, _) => AskError::Failed(format!(
            "no responders for {subject}: is JetStream enabled in this server's cluster, and is the user in the right account?"
        )),
        _ => AskError::Failed(format!("{subject}: {e}")),
    })?;
    match read_reply(&msg.payload) {
        Reply::Success => Ok(()),
        // The description alone: this is no refusal of the transfer, but a group between
        // leaders (its caller words it).
        Reply::Refused {
            description,
            code: Some(NO_LEADER_ERR_CODE),
        } => Err(AskError::NoLeader(format!(
            "{description} (err_code {NO_LEADER_ERR_CODE})"
        ))),
        other => Err(AskError::Failed(other.judged().unwrap_err())),
    }
}

/// What a JetStream API reply says, read once.
enum Reply {
    Success,
    /// An `error`: its description (made printable) and `err_code`.
    Refused {
        description: String,
        code: Option<u64>,
    },
    /// Not JSON, or JSON that neither succeeds nor refuses (made printable).
    Unexpected(String),
}

fn read_reply(payload: &[u8]) -> Reply {
    let Ok(v) = serde_json::from_slice::<Value>(payload) else {
        return Reply::Unexpected(format!(
            "the reply is not JSON: {}",
            message(&String::from_utf8_lossy(&payload[..payload.len().min(400)]))
        ));
    };
    if v.pointer("/success") == Some(&Value::Bool(true)) {
        return Reply::Success;
    }
    match v.pointer("/error") {
        Some(e) => Reply::Refused {
            description: message(
                e.pointer("/description")
                    .and_then(Value::as_str)
                    .unwrap_or("refused"),
            ),
            code: e.pointer("/err_code").and_then(Value::as_u64),
        },
        None => Reply::Unexpected(format!("an unexpected reply: {}", message(&v.to_string()))),
    }
}

impl Reply {
    fn judged(self) -> Result<(), String> {
        match self {
            Reply::Success => Ok(()),
            Reply::Refused { description, code } => Err(format!(
                "refused the transfer: {description} (err_code {})",
                code.map_or("?".into(), |c| c.to_string())
            )),
            Reply::Unexpected(why) => Err(why),
        }
    }
}

/// The reply of a JetStream API request: `{"success": true}`, or an `error` with its
/// description and code.
pub fn judge_reply(payload: &[u8]) -> Result<(), String> {
    read_reply(payload).judged()
}

/// Why no request can be sent as `who` with `vars`: neither a .creds file nor a user is
/// given (an empty value is none). None when one is; whether the server takes it is asked by
/// [`is_system_user`] or the request itself.
pub fn missing_credentials(vars: &Vars, who: &Who) -> Option<String> {
    let p = who.prefix();
    if vars.get(&format!("{p}_CREDS")).is_some() || vars.get(&format!("{p}_USER")).is_some() {
        return None;
    }
    Some(match who {
        Who::System => "moving the NATS meta leader needs a system-account user: export NATS_USER and NATS_PASSWORD, or NATS_CREDS (the nats CLI's variables), or put them in a Secret named by --credentials-secret or the annotation kubectl-raft.io/credentials-secret".into(),
        Who::Account(a) => format!(
            "moving the leaders of account {a}'s streams and consumers needs a user of that account: {p}_USER and {p}_PASSWORD, or {p}_CREDS, in the environment or the credentials Secret or file"
        ),
    })
}

/// Whether the connection's user belongs to the system account, asked as the stepdown will
/// be: every server answers `$SYS.REQ.SERVER.PING` to the system account's users; in any other
/// account nothing listens on that subject (no responders). A timeout is said as such: a
/// slow server, or a system user not allowed to publish it.
pub async fn confirm_system_user(
    client: &async_nats::Client,
    limit: Duration,
) -> Result<(), String> {
    let subject = "$SYS.REQ.SERVER.PING";
    let asked = tokio::time::timeout(limit, client.request(subject, Vec::new().into())).await;
    match asked {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) if e.kind() == async_nats::RequestErrorKind::NoResponders => Err(format!(
            "it is not a user of the system account, which alone may move the meta leader (nothing answers {subject} in its account)"
        )),
        Ok(Err(e)) if e.kind() != async_nats::RequestErrorKind::TimedOut => {
            Err(format!("{subject}: {e}"))
        }
        _ => Err(format!(
            "no answer to {subject} within {limit:?}: only the system account's users get one, and only when they may publish to it"
        )),
    }
}

/// What a server says of the connection's own user (`$SYS.REQ.USER.INFO`, which any user may
/// ask of NATS 2.10 and later): its account, and the subjects it may and may not publish to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    pub account: String,
    /// A JWT account's name beside its public key.
    pub account_name: Option<String>,
    pub publish_allow: Vec<String>,
    pub publish_deny: Vec<String>,
}

impl UserInfo {
    /// From the reply's JSON; None when it says nothing of a user (an error, an older server).
    pub fn from_reply(payload: &[u8]) -> Option<UserInfo> {
        let v: Value = serde_json::from_slice(payload).ok()?;
        let data = v.get("data")?;
        let list = |p: &str| -> Vec<String> {
            data.pointer(p)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        };
        Some(UserInfo {
            account: data.get("account")?.as_str()?.to_string(),
            account_name: data
                .get("account_name")
                .and_then(Value::as_str)
                .map(str::to_string),
            publish_allow: list("/permissions/publish/allow"),
            publish_deny: list("/permissions/publish/deny"),
        })
    }

    /// Whether it is a user of `account` (by name, or by a JWT account's name).
    pub fn in_account(&self, account: &str) -> bool {
        self.account == account || self.account_name.as_deref() == Some(account)
    }

    /// Whether it may publish to `subject`: allowed (no allow list allows all) and not denied.
    pub fn may_publish(&self, subject: &str) -> bool {
        let allowed = self.publish_allow.is_empty()
            || self
                .publish_allow
                .iter()
                .any(|p| subject_matches(p, subject));
        allowed
            && !self
                .publish_deny
                .iter()
                .any(|p| subject_matches(p, subject))
    }
}

/// Whether the NATS subject pattern `pattern` (`*` one token, `>` the rest) matches `subject`.
pub fn subject_matches(pattern: &str, subject: &str) -> bool {
    let mut p = pattern.split('.');
    let mut s = subject.split('.');
    loop {
        match (p.next(), s.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(_)) => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// The connection's user as a server describes it; None when no server answers the request
/// (a server older than 2.10), so the caller falls back to other questions.
pub async fn user_info(
    client: &async_nats::Client,
    limit: Duration,
) -> Result<Option<UserInfo>, String> {
    let subject = "$SYS.REQ.USER.INFO";
    match tokio::time::timeout(limit, client.request(subject, Vec::new().into())).await {
        Ok(Ok(m)) => Ok(UserInfo::from_reply(&m.payload)),
        Ok(Err(e)) if e.kind() == async_nats::RequestErrorKind::NoResponders => Ok(None),
        Ok(Err(e)) if e.kind() != async_nats::RequestErrorKind::TimedOut => {
            Err(format!("{subject}: {e}"))
        }
        _ => Ok(None),
    }
}

/// Whether the connection's user sees the stream `stream`, as a user of its account does: a
/// user of another account is told the stream is not found.
pub async fn confirm_stream(
    client: &async_nats::Client,
    stream: &str,
    limit: Duration,
) -> Result<(), String> {
    let subject = format!("$JS.API.STREAM.INFO.{stream}");
    let asked = tokio::time::timeout(limit, client.request(subject.clone(), Vec::new().into()))
        .await
        .map_err(|_| format!("no answer to {subject} within {limit:?}"))?
        .map_err(|e| match e.kind() {
            async_nats::RequestErrorKind::NoResponders => format!(
                "no responders for {subject}: the user's account has no JetStream, so it is not the stream's account"
            ),
            _ => format!("{subject}: {e}"),
        })?;
    let v: Value = serde_json::from_slice(&asked.payload)
        .map_err(|_| format!("the answer to {subject} is not JSON"))?;
    match v.pointer("/error/description").and_then(Value::as_str) {
        Some(d) => Err(format!("{subject}: {}", message(d))),
        None => Ok(()),
    }
}

async fn options(limit: Duration, vars: &Vars, who: &Who) -> Result<ConnectOptions, String> {
    let p = who.prefix();
    let creds_var = format!("{p}_CREDS");
    let base = match (vars.get(&creds_var), vars.get(&format!("{p}_USER"))) {
        // A Secret holds the file's content, always (its writer must not make the plugin open
        // a file of the user's); the environment or an env file, like the nats CLI, a path
        // or the content. No value is ever quoted in a message.
        (Some(creds), _)
            if vars.is_from_secret(&creds_var) || creds.contains("BEGIN NATS USER JWT") =>
        {
            ConnectOptions::with_credentials(&creds).map_err(|_| {
                format!(
                    "{creds_var} from {} is not the content of a NATS .creds file (a JWT and a seed between their BEGIN and END lines)",
                    vars.describe()
                )
            })?
        }
        (Some(path), _) => ConnectOptions::new()
            .credentials_file(&path)
            .await
            .map_err(|e| {
                format!(
                    "cannot read the .creds file {creds_var} names ({}): {}",
                    vars.describe(),
                    e.kind()
                )
            })?,
        (None, Some(user)) => ConnectOptions::with_user_and_password(
            user,
            vars.get(&format!("{p}_PASSWORD")).unwrap_or_default(),
        ),
        (None, None) => {
            return Err(missing_credentials(vars, who).unwrap_or_default());
        }
    };
    Ok(base
        .name("kubectl-raft")
        .connection_timeout(limit)
        .request_timeout(Some(limit))
        // async-nats takes Some(0) for "no limit": one attempt more, then give up, so a
        // client that lost its server does not keep sending the password.
        .max_reconnects(Some(1))
        .ignore_discovered_servers())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_login_is_told_from_no_connection() {
        use async_nats::ConnectErrorKind as K;
        let tls = crate::tls::Tls::new(None, &Default::default()).unwrap();
        let of = |k| {
            ConnectError::of(
                "nats://x:4222",
                &async_nats::ConnectError::new(k),
                &tls,
                None,
            )
        };
        assert!(matches!(
            of(K::AuthorizationViolation),
            ConnectError::Refused(_)
        ));
        assert!(matches!(of(K::Authentication), ConnectError::Refused(_)));
        for k in [K::TimedOut, K::Tls, K::Io, K::Dns, K::MaxReconnects] {
            assert!(matches!(of(k), ConnectError::Unreachable(_)));
        }
    }

    /// A server that asked for a client certificate and then closed the connection before
    /// answering CONNECT refused it (TLS 1.3: the close can overtake the alert).
    #[test]
    fn a_close_after_a_certificate_was_asked_is_tls_refusing_it() {
        let tls = crate::tls::Tls::new(None, &Default::default()).unwrap();
        let e =
            async_nats::ConnectError::with_source(async_nats::ConnectErrorKind::Io, "broken pipe");
        let asked = crate::tls::CertAsked::noted();
        match ConnectError::of("nats://x:4222", &e, &tls, Some(&asked)) {
            ConnectError::Tls(m) => assert!(m.contains("requires a client certificate"), "{m}"),
            other => panic!("expected TLS's refusal, got {other:?}"),
        }
    }

    /// A server's own -ERR after a handshake that went through is not TLS refusing the
    /// certificate, though the server asked for one.
    #[test]
    fn a_servers_own_error_after_a_certificate_was_asked_is_not_a_tls_refusal() {
        let tls = crate::tls::Tls::new(None, &Default::default()).unwrap();
        let e = async_nats::ConnectError::with_source(
            async_nats::ConnectErrorKind::Io,
            async_nats::ServerError::Other("maximum connections exceeded".into()),
        );
        let asked = crate::tls::CertAsked::noted();
        match ConnectError::of("nats://x:4222", &e, &tls, Some(&asked)) {
            ConnectError::Unreachable(m) => assert!(m.contains("maximum connections"), "{m}"),
            other => panic!("expected the server's own word, got {other:?}"),
        }
    }

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

    fn vars(pairs: &[(&str, &str)]) -> Vars {
        Vars::new(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            "file ops.env",
        )
    }

    #[test]
    fn a_request_without_a_user_or_creds_is_missing_its_credentials() {
        let none = vars(&[("NATS_USER", ""), ("NATS_APP_PASSWORD", "p")]);
        assert!(missing_credentials(&none, &Who::System)
            .unwrap()
            .contains("NATS_USER and NATS_PASSWORD"));
        assert!(missing_credentials(&none, &Who::Account("APP".into()))
            .unwrap()
            .contains("NATS_APP_USER"));
    }

    #[test]
    fn a_user_or_a_creds_file_is_not_missing() {
        let user = vars(&[("NATS_USER", "sys")]);
        assert_eq!(missing_credentials(&user, &Who::System), None);
        let creds = vars(&[("NATS_APP_CREDS", "/x.creds")]);
        assert_eq!(
            missing_credentials(&creds, &Who::Account("APP".into())),
            None
        );
        assert!(missing_credentials(&creds, &Who::System).is_some());
    }

    #[test]
    fn subjects_match_nats_wildcards() {
        assert!(subject_matches(
            "$JS.API.>",
            "$JS.API.STREAM.LEADER.STEPDOWN.S"
        ));
        assert!(subject_matches(
            "$JS.API.STREAM.LEADER.STEPDOWN.*",
            "$JS.API.STREAM.LEADER.STEPDOWN.S"
        ));
        assert!(!subject_matches(
            "$JS.API.STREAM.*",
            "$JS.API.STREAM.LEADER.STEPDOWN.S"
        ));
        assert!(!subject_matches("$JS.API.>", "$JS.API"));
        assert!(subject_matches("a.b", "a.b"));
        assert!(!subject_matches("a.b", "a.b.c"));
    }

    #[test]
    fn a_user_may_publish_what_it_is_allowed_and_not_denied() {
        let info = UserInfo::from_reply(
            br#"{"server":{"name":"n1"},"data":{"user":"ops","account":"APP","permissions":{"publish":{"allow":["$JS.API.>"],"deny":["$JS.API.CONSUMER.>"]}}}}"#,
        )
        .unwrap();
        assert!(info.in_account("APP") && !info.in_account("OPS"));
        assert!(info.may_publish("$JS.API.STREAM.LEADER.STEPDOWN.S"));
        assert!(!info.may_publish("$JS.API.CONSUMER.LEADER.STEPDOWN.S.c"));
        assert!(!info.may_publish("$SYS.REQ.SERVER.PING"));
        let open = UserInfo::from_reply(br#"{"data":{"user":"app","account":"APP"}}"#).unwrap();
        assert!(open.may_publish("anything.at.all"));
        assert_eq!(UserInfo::from_reply(br#"{"error":{"code":500}}"#), None);
    }

    #[test]
    fn an_accounts_variables_are_named_after_it() {
        assert_eq!(Who::System.prefix(), "NATS");
        assert_eq!(Who::Account("APP".into()).prefix(), "NATS_APP");
        assert_eq!(
            Who::Account("team-a.prod".into()).prefix(),
            "NATS_TEAM_A_PROD"
        );
    }
}
