//! Describing a system the tool does not know, with annotations on the StatefulSet (or
//! its pods). Documented in docs/profiles.md.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};

use super::{
    parse_untrusted_profiles, CheckSpec, Fact, FieldSpec, HttpRequest, PortSpec, Profile,
    RequestSpec, Scheme,
};

pub const PREFIX: &str = "kubectl-raft.io/";
/// Names a built-in (or --profiles) system, skipping recognition.
pub const SYSTEM: &str = "kubectl-raft.io/system";
/// A whole profile in the YAML format of the built-in ones.
pub const PROFILE: &str = "kubectl-raft.io/profile";
pub const PORT: &str = "kubectl-raft.io/port";
pub const SCHEME: &str = "kubectl-raft.io/scheme";
pub const HEALTH_PATH: &str = "kubectl-raft.io/health-path";
pub const READY_PATH: &str = "kubectl-raft.io/ready-path";
pub const ROLE_PATH: &str = "kubectl-raft.io/role-path";
pub const ROLE_JSON: &str = "kubectl-raft.io/role-json-pointer";
pub const LEADER_VALUE: &str = "kubectl-raft.io/leader-value";
pub const LEADER_STATUS: &str = "kubectl-raft.io/leader-status";
pub const LEADER_ID_JSON: &str = "kubectl-raft.io/leader-id-json-pointer";
pub const MEMBER_ID_JSON: &str = "kubectl-raft.io/member-id-json-pointer";
pub const TERM_JSON: &str = "kubectl-raft.io/term-json-pointer";
pub const COMMIT_INDEX_JSON: &str = "kubectl-raft.io/commit-index-json-pointer";
/// Names the Secret (in the StatefulSet's namespace) whose keys are the variables the
/// system's credentials are read from (NATS_USER, CONSUL_HTTP_TOKEN, ...); any system.
pub const CREDENTIALS_SECRET: &str = "kubectl-raft.io/credentials-secret";
/// Names the Secret (in the StatefulSet's namespace) with the TLS to speak to its replicas:
/// `ca.crt`, and `tls.crt` with `tls.key` for a client certificate (the shape of a
/// `kubernetes.io/tls` Secret and of cert-manager's); labelled as a credentials Secret is.
pub const TLS_SECRET: &str = "kubectl-raft.io/tls-secret";

/// What the eviction gate may assume of this cluster, as `drain`'s `--assume-*` flags do:
/// `voters-are-pods`, `followers-current` (comma-separated). Read by the gate only.
pub const GATE_ASSUME: &str = "kubectl-raft.io/gate-assume";

/// Annotations of ours that describe no system: beside them alone, the system is recognised
/// as usual.
const NOT_PROFILE: [&str; 4] = [CREDENTIALS_SECRET, TLS_SECRET, GATE_ASSUME, SCHEME];

/// The gate's assumptions as the annotation writes them, if any.
pub fn gate_assume(ann: &BTreeMap<String, String>) -> Option<String> {
    ann.get(GATE_ASSUME)
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The Secret the annotations name for TLS, if any.
pub fn tls_secret(ann: &BTreeMap<String, String>) -> Option<String> {
    ann.get(TLS_SECRET)
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The scheme the annotation `kubectl-raft.io/scheme` sets for the cluster's ports, beside
/// any profile (a built-in system's, one recognised, one described): `https` where the
/// system is served over TLS.
pub fn scheme(ann: &BTreeMap<String, String>) -> Result<Option<Scheme>> {
    match ann.get(SCHEME).map(|s| s.trim()).filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some("http") => Ok(Some(Scheme::Http)),
        Some("https") => Ok(Some(Scheme::Https)),
        Some(other) => bail!("annotation {SCHEME}: {other:?} is neither http nor https"),
    }
}

/// The Secret the annotations name for credentials, if any.
pub fn credentials_secret(ann: &BTreeMap<String, String>) -> Option<String> {
    ann.get(CREDENTIALS_SECRET)
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// What the annotations ask for.
#[derive(Debug, Clone, PartialEq)]
pub enum Described {
    /// No annotation of ours.
    Nothing,
    /// `system: NAME`: use that profile.
    System(String),
    /// A profile built from the annotations.
    Profile(Box<Profile>),
}

/// The longest profile an annotation may hold, in bytes.
pub const MAX_PROFILE_BYTES: usize = 16 * 1024;

/// The most requests a profile from an annotation may make of each replica (health,
/// readiness, facts and the member list together): every survey sends them to every pod.
pub const MAX_REQUESTS: usize = 8;

pub fn describe(name: &str, ann: &BTreeMap<String, String>) -> Result<Described> {
    let get = |k: &str| ann.get(k).map(|s| s.trim()).filter(|s| !s.is_empty());
    if let Some(yaml) = get(PROFILE) {
        if yaml.len() > MAX_PROFILE_BYTES {
            bail!(
                "annotation {PROFILE} holds {} bytes, more than {MAX_PROFILE_BYTES}: pass a profile that large in a file of your own with --profiles",
                yaml.len()
            );
        }
        let text = if yaml.starts_with('-') {
            yaml.to_string()
        } else {
            format!("- {}", indent(yaml))
        };
        let mut ps =
            parse_untrusted_profiles(&text).with_context(|| format!("annotation {PROFILE}"))?;
        if ps.len() != 1 {
            bail!("annotation {PROFILE} must hold exactly one profile");
        }
        let p = ps.remove(0);
        if let Err(why) = harmless(&p) {
            bail!(
                "annotation {PROFILE}: {why}. Whoever can edit a StatefulSet can write its annotations, so they may describe only GET requests without headers, body or variables, at most {MAX_REQUESTS} of them, no transfer and no groups, answers of at most 1 MiB; pass anything more in a profile file of your own with --profiles (docs/security.md)"
            );
        }
        return Ok(Described::Profile(Box::new(p)));
    }
    let Some(health) = get(HEALTH_PATH) else {
        if let Some(system) = get(SYSTEM) {
            return Ok(Described::System(system.to_string()));
        }
        if let Some(k) = ann
            .keys()
            .find(|k| k.starts_with(PREFIX) && !NOT_PROFILE.contains(&k.as_str()))
        {
            bail!("annotation {k} needs {HEALTH_PATH} (or {SYSTEM}, or {PROFILE}) beside it");
        }
        return Ok(Described::Nothing);
    };
    let port_value = get(PORT)
        .with_context(|| format!("{HEALTH_PATH} needs {PORT} beside it (a port number or name)"))?;
    let port = match port_value.parse::<i32>() {
        Ok(n) => PortSpec {
            names: vec![],
            numbers: vec![n],
        },
        Err(_) => PortSpec {
            names: vec![port_value.to_string()],
            numbers: vec![],
        },
    };
    let scheme = scheme(ann)?.unwrap_or(Scheme::Http);
    let check = |path: &str| CheckSpec {
        request: HttpRequest {
            method: "GET".into(),
            path: path.into(),
            body: None,
            headers: Default::default(),
            max_bytes: None,
        },
        ok_status: vec![200],
        ok_json: BTreeMap::new(),
        port: None,
        otherwise: None,
        fail_json: BTreeMap::new(),
    };
    let mut fields = BTreeMap::new();
    let json = |p: &str| FieldSpec {
        json: Some(p.to_string()),
        ..Default::default()
    };
    if let Some(ptr) = get(ROLE_JSON) {
        let leader = get(LEADER_VALUE).unwrap_or("leader");
        let mut map = BTreeMap::new();
        map.insert(leader.to_string(), "leader".to_string());
        fields.insert(
            Fact::Role,
            FieldSpec {
                map: Some(map),
                ..json(ptr)
            },
        );
    } else if let Some(code) = get(LEADER_STATUS) {
        code.parse::<u16>().with_context(|| {
            format!("annotation {LEADER_STATUS}: {code:?} is not an HTTP status code")
        })?;
        // Any other answer means "not the leader".
        let map = BTreeMap::from([
            (code.to_string(), "leader".to_string()),
            ("*".to_string(), "follower".to_string()),
        ]);
        fields.insert(
            Fact::Role,
            FieldSpec {
                status: Some(map),
                ..Default::default()
            },
        );
    }
    for (key, fact) in [
        (LEADER_ID_JSON, Fact::LeaderId),
        (MEMBER_ID_JSON, Fact::MemberId),
        (TERM_JSON, Fact::Term),
        (COMMIT_INDEX_JSON, Fact::CommitIndex),
    ] {
        if let Some(ptr) = get(key) {
            fields.insert(fact, json(ptr));
        }
    }
    let mut requests = vec![];
    if !fields.is_empty() {
        let path = get(ROLE_PATH).unwrap_or(health);
        let status_only = fields.values().all(|f| f.status.is_some());
        requests.push(RequestSpec {
            name: "role".into(),
            port: None,
            request: HttpRequest {
                method: "GET".into(),
                path: path.into(),
                body: None,
                headers: Default::default(),
                max_bytes: None,
            },
            accept_status: if status_only { vec![] } else { vec![200] },
            optional: false,
            unwrap_json: None,
            format: Default::default(),
            separator: "\t".into(),
            error_json: None,
            fields,
        });
    }
    let profile = Profile {
        name: get(SYSTEM).unwrap_or(name).to_string(),
        description: "described by annotations".into(),
        detect: Default::default(),
        port,
        scheme,
        tls_port: None,
        health: check(health),
        ready: get(READY_PATH).map(check),
        requests,
        leader_known_from_leader_id: get(LEADER_ID_JSON).is_some(),
        membership: None,
        transfer: None,
        no_transfer: None,
        groups: None,
        health_needs_leader: false,
        proven: None,
    };
    profile
        .validate()
        .context("the kubectl-raft.io/ annotations")?;
    Ok(Described::Profile(Box::new(profile)))
}

/// What a profile written by whoever can edit a StatefulSet may ask of a replica, on behalf
/// of whoever runs the plugin (docs/security.md): reads only, nothing of the user's (no
/// header, hence no variable), nothing that changes the cluster (no transfer, no groups'
/// stepdowns), bounded answers.
pub fn harmless(p: &Profile) -> Result<(), String> {
    if p.transfer.is_some() {
        return Err("it has a `transfer` section".into());
    }
    if p.groups.is_some() {
        return Err("it has a `groups` section".into());
    }
    let n = p.http_requests().len();
    if n > MAX_REQUESTS {
        return Err(format!(
            "it makes {n} requests of each replica, more than {MAX_REQUESTS}"
        ));
    }
    // A tenant's words, quoted one line at a time.
    let m = crate::model::text::message;
    for r in p.http_requests() {
        if !r.method.eq_ignore_ascii_case("GET") {
            return Err(format!(
                "{} {} is not a GET request",
                m(&r.method),
                m(&r.path)
            ));
        }
        if r.body.is_some() {
            return Err(format!("GET {} has a body", m(&r.path)));
        }
        if !r.headers.is_empty() {
            let names: Vec<String> = r.headers.keys().map(|k| m(k)).collect();
            return Err(format!(
                "GET {} sets headers ({})",
                m(&r.path),
                names.join(", ")
            ));
        }
        if r.max_bytes
            .is_some_and(|m| m > crate::model::MAX_ANSWER_BYTES)
        {
            return Err(format!("GET {} raises max_bytes above 1 MiB", m(&r.path)));
        }
    }
    Ok(())
}

fn indent(s: &str) -> String {
    s.lines()
        .enumerate()
        .map(|(i, l)| {
            if i == 0 {
                l.to_string()
            } else {
                format!("  {l}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{HttpAnswer, RaftFacts, Role};
    use crate::profile::extract::{extract, finish};

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn no_annotations_means_nothing() {
        assert_eq!(
            describe("x", &ann(&[("other/thing", "1")])).unwrap(),
            Described::Nothing
        );
    }

    #[test]
    fn a_credentials_secret_alone_describes_no_system_and_is_read() {
        let a = ann(&[(CREDENTIALS_SECRET, " nats-ops ")]);
        assert_eq!(describe("x", &a).unwrap(), Described::Nothing);
        assert_eq!(credentials_secret(&a).as_deref(), Some("nats-ops"));
        assert_eq!(credentials_secret(&ann(&[(CREDENTIALS_SECRET, "")])), None);
    }

    #[test]
    fn a_scheme_alone_describes_no_system_and_is_read() {
        let a = ann(&[(SCHEME, "https")]);
        assert_eq!(describe("x", &a).unwrap(), Described::Nothing);
        assert_eq!(scheme(&a).unwrap(), Some(Scheme::Https));
    }

    #[test]
    fn a_scheme_beside_a_system_keeps_the_system_and_is_read() {
        let a = ann(&[(SYSTEM, "vault"), (SCHEME, "https")]);
        assert_eq!(
            describe("x", &a).unwrap(),
            Described::System("vault".into())
        );
        assert_eq!(scheme(&a).unwrap(), Some(Scheme::Https));
        assert!(scheme(&ann(&[(SCHEME, "tls")])).is_err());
    }

    #[test]
    fn a_tls_secret_alone_describes_no_system_and_is_read() {
        let a = ann(&[(TLS_SECRET, " etcd-client-tls ")]);
        assert_eq!(describe("x", &a).unwrap(), Described::Nothing);
        assert_eq!(tls_secret(&a).as_deref(), Some("etcd-client-tls"));
    }

    #[test]
    fn the_gates_assumptions_alone_describe_no_system_and_are_read() {
        let a = ann(&[(GATE_ASSUME, " voters-are-pods ")]);
        assert_eq!(describe("x", &a).unwrap(), Described::Nothing);
        assert_eq!(gate_assume(&a).as_deref(), Some("voters-are-pods"));
    }

    #[test]
    fn system_annotation_names_a_profile() {
        assert_eq!(
            describe("x", &ann(&[(SYSTEM, "etcd")])).unwrap(),
            Described::System("etcd".into())
        );
    }

    #[test]
    fn role_from_a_json_field() {
        let d = describe(
            "mydb",
            &ann(&[
                (PORT, "8080"),
                (HEALTH_PATH, "/healthz"),
                (ROLE_PATH, "/raft"),
                (ROLE_JSON, "/state"),
                (LEADER_VALUE, "Leader"),
                (TERM_JSON, "/term"),
            ]),
        )
        .unwrap();
        let Described::Profile(p) = d else { panic!() };
        assert_eq!(p.port.numbers, vec![8080]);
        let mut f = RaftFacts::default();
        extract(
            &p.requests[0],
            &HttpAnswer {
                status: 200,
                body: br#"{"state":"Leader","term":4}"#.to_vec(),
            },
            &mut f,
        )
        .unwrap();
        finish(&p, &mut f);
        assert_eq!(f.role, Some(Role::Leader));
        assert_eq!(f.term, Some(4));
    }

    #[test]
    fn role_from_a_status_code() {
        let Described::Profile(p) = describe(
            "x",
            &ann(&[
                (PORT, "http"),
                (HEALTH_PATH, "/h"),
                (ROLE_PATH, "/leader"),
                (LEADER_STATUS, "200"),
            ]),
        )
        .unwrap() else {
            panic!()
        };
        for (status, role) in [
            (200, Role::Leader),
            (503, Role::Follower),
            (404, Role::Follower),
        ] {
            let mut f = RaftFacts::default();
            extract(
                &p.requests[0],
                &HttpAnswer {
                    status,
                    body: vec![],
                },
                &mut f,
            )
            .unwrap();
            assert_eq!(f.role, Some(role), "status {status}");
        }
    }

    #[test]
    fn incomplete_annotations_say_what_is_missing() {
        let e = describe("x", &ann(&[(HEALTH_PATH, "/h")])).unwrap_err();
        assert!(format!("{e:#}").contains(PORT));
        let e = describe("x", &ann(&[(ROLE_JSON, "/x")])).unwrap_err();
        assert!(format!("{e:#}").contains(HEALTH_PATH));
        let e = describe("x", &ann(&[(PORT, "1"), (HEALTH_PATH, "h")])).unwrap_err();
        assert!(format!("{e:#}").contains("must start with"));
    }

    /// A path with a line break would forge a line of `-v`'s log (and of error messages).
    #[test]
    fn a_path_with_a_line_break_or_a_space_is_refused() {
        for path in ["/h\nkube-system/etcd-0:2379/health 200", "/h x", "/h\u{7}"] {
            let e = describe("x", &ann(&[(PORT, "1"), (HEALTH_PATH, path)])).unwrap_err();
            assert!(
                format!("{e:#}").contains("a space or a control character"),
                "{path:?}: {e:#}"
            );
        }
    }

    #[test]
    fn a_whole_profile_in_one_annotation() {
        let yaml = "name: mine\nport: {numbers: [7000]}\nhealth: {request: {path: /ok}}\n";
        let Described::Profile(p) = describe("x", &ann(&[(PROFILE, yaml)])).unwrap() else {
            panic!()
        };
        assert_eq!(p.name, "mine");
        assert_eq!(p.port.numbers, vec![7000]);
    }

    fn refused(yaml: &str) -> String {
        let e = describe("x", &ann(&[(PROFILE, yaml)])).unwrap_err();
        format!("{e:#}")
    }

    #[test]
    fn an_annotation_profile_cannot_send_the_users_variables() {
        let e = refused(
            "name: t\nport: {numbers: [80]}\nhealth: {request: {path: /h, headers: {X: \"${SOME_VAR:-none}\"}}}\n",
        );
        assert!(e.contains("sets headers (X)"), "{e}");
        assert!(e.contains("--profiles"), "{e}");
    }

    #[test]
    fn an_annotation_profile_cannot_write() {
        let e = refused(
            "name: t\nport: {numbers: [2379]}\nhealth: {request: {method: POST, path: /v3/kv/put, body: '{}'}}\n",
        );
        assert!(e.contains("POST /v3/kv/put is not a GET request"), "{e}");
        let e = refused(
            "name: t\nport: {numbers: [80]}\nhealth: {request: {path: /h}}\nrequests:\n- name: r\n  request: {path: /r, body: x}\n  fields: {role: {json: /r}}\n",
        );
        assert!(e.contains("has a body"), "{e}");
    }

    #[test]
    fn an_annotation_profile_cannot_transfer_or_read_large_answers() {
        let e = refused(
            "name: t\nport: {numbers: [80]}\nhealth: {request: {path: /h}}\ntransfer: {untargeted: {send_to: leader, request: {path: /x}}}\n",
        );
        assert!(e.contains("transfer"), "{e}");
        let e = refused(
            "name: t\nport: {numbers: [80]}\nhealth: {request: {path: /h, max_bytes: 2000000}}\n",
        );
        assert!(e.contains("max_bytes"), "{e}");
    }

    #[test]
    fn no_profile_may_leave_the_replicas_port() {
        for path in ["/../../secrets", "/a/%2e%2e/b", "/a/./b", "/x/%2E%2E"] {
            let yaml = format!(
                "name: t\nport: {{numbers: [80]}}\nhealth: {{request: {{path: \"{path}\"}}}}\n"
            );
            let e = refused(&yaml);
            assert!(e.contains("segment"), "{path}: {e}");
        }
        assert!(!crate::profile::escapes_its_pod("/v1/status?x=../y"));
    }

    #[test]
    fn an_annotation_profile_makes_few_requests() {
        let requests: String = (0..9)
            .map(|i| {
                format!(
                    "- {{name: r{i}, request: {{path: /r{i}}}, fields: {{role: {{json: /r}}}}}}\n"
                )
            })
            .collect();
        let e = refused(&format!(
            "name: t\nport: {{numbers: [80]}}\nhealth: {{request: {{path: /h}}}}\nrequests:\n{requests}"
        ));
        assert!(
            e.contains("10 requests") && e.contains("more than 8"),
            "{e}"
        );
    }

    #[test]
    fn aliases_cannot_blow_an_annotation_up() {
        // Within the request cap, but more aliases than a few: each could stand for a list of
        // thousands in a larger document, so their number is capped while parsing.
        let requests: String = (0..6)
            .map(|_| "- {name: *n, request: {path: *p}, fields: {role: {json: *p}}}\n")
            .collect();
        let yaml = format!(
            "name: &n t\ndescription: *n\nport: {{numbers: [80]}}\nhealth: {{request: {{path: &p /h}}}}\nready: {{request: {{path: *p}}}}\nrequests:\n{requests}"
        );
        let e = refused(&yaml);
        assert!(e.to_lowercase().contains("alias"), "{e}");
        let e = refused(&"#".repeat(MAX_PROFILE_BYTES + 1));
        assert!(e.contains("more than"), "{e}");
    }

    #[test]
    fn a_profile_name_cannot_hold_a_line_of_its_own() {
        let e = refused("name: \"x\\nkube-system/etcd: QUORUM LOST\"\nport: {numbers: [80]}\nhealth: {request: {path: /h}}\n");
        assert!(e.contains("must be at most 63 letters"), "{e}");
        assert!(!e.contains('\n'), "{e:?}");
    }
}
