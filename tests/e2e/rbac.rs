//! Least privilege, end to end: each verb runs as a ServiceAccount bound to exactly its
//! ClusterRole from docs/rbac.yaml, and with one required permission taken away it fails
//! with a message that names that permission. (drain's are in tests/e2e/drain.rs, which holds
//! the nodes.)

use crate::common::*;
use serde_json::Value;

/// What status's role grants that it can do without, and why.
const STATUS_OPTIONAL: &[(&str, &str, &str)] = &[
    (
        "get",
        "nodes",
        "the report says \"unknown\" for node readiness and cordons",
    ),
    (
        "list",
        "nodes",
        "the report says \"unknown\" for node readiness and cordons",
    ),
    (
        "get",
        "namespaces",
        "-n is then not checked against real namespaces",
    ),
    (
        "list",
        "namespaces",
        "-n is then not checked against real namespaces",
    ),
    (
        "list",
        "validatingwebhookconfigurations",
        "the report says the gate's state is unknown",
    ),
    (
        "list",
        "events",
        "the report says the gate's state is unknown",
    ),
    ("watch", "pods", WATCH_ONLY),
    ("watch", "services", WATCH_ONLY),
    ("watch", "nodes", WATCH_ONLY),
    ("watch", "statefulsets", WATCH_ONLY),
    ("watch", "endpointslices", WATCH_ONLY),
    ("watch", "poddisruptionbudgets", WATCH_ONLY),
];

const WATCH_ONLY: &str = "only status --watch watches (without it, it lists every round)";

/// What yield's role grants that it can do without, and why: status's nodes and namespaces.
const YIELD_OPTIONAL: &[(&str, &str, &str)] = STATUS_OPTIONAL.split_at(4).0;

fn etcd_namespace(prefix: &str) -> TestNamespace {
    let ns = TestNamespace::new(prefix);
    deploy_etcd(&ns.name, 3);
    ns
}

/// etcd's status API is a POST: etcd's namespace needs kubectl-raft-proxy-post beside the
/// status role.
#[test]
fn status_runs_with_exactly_its_role() {
    let _nodes = shared_nodes();
    let ns = etcd_namespace("rbac-status");
    let who = RbacSubject::bound_to("kubectl-raft-status", &ns.name).and("kubectl-raft-proxy-post");
    let (code, out, err) = who.raft(&["status", "-n", &ns.name, "-o", "json"]);
    assert_eq!(code, Some(0), "{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    let c = cluster(&report, &ns.name);
    assert!(c["summary"]["leader"].is_string(), "{c:#}");
    assert_eq!(c["summary"]["faultTolerance"], 1, "{c:#}");
}

/// `--as` acts as another user, as kubectl's does: the admin, as the ServiceAccount bound to
/// the status role, reads the cluster; as one bound to nothing, the API server refuses it,
/// naming that account (its own words: the headers were sent).
#[test]
fn status_as_another_user_has_exactly_that_users_rights() {
    let _nodes = shared_nodes();
    let ns = etcd_namespace("rbac-as");
    let _who =
        RbacSubject::bound_to("kubectl-raft-status", &ns.name).and("kubectl-raft-proxy-post");
    let operator = format!("system:serviceaccount:{}:operator", ns.name);
    let out = raft(&["status", "-n", &ns.name, "-o", "json", "--as", &operator]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        cluster(&report, &ns.name)["summary"]["leader"].is_string(),
        "{report:#}"
    );
    let nobody = format!("system:serviceaccount:{}:nobody", ns.name);
    let out = raft(&["status", "-n", &ns.name, "--as", &nobody]);
    assert_ne!(out.status.code(), Some(0));
    let err = stderr(&out);
    assert!(err.contains("forbidden") && err.contains(&nobody), "{err}");
}

/// A system asked with GETs only (ZooKeeper's AdminServer) needs the status role alone: no
/// POST through pods/proxy, so no right to reach any port of any pod with one.
#[test]
fn status_of_a_get_only_system_needs_no_post() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("rbac-status-get");
    deploy_zookeeper(&ns.name);
    let who = RbacSubject::bound_to("kubectl-raft-status", &ns.name);
    let (code, out, err) = who.raft(&["status", "zk", "-n", &ns.name, "-o", "json"]);
    assert_eq!(code, Some(0), "{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(cluster(&report, &ns.name)["summary"]["healthyVoters"], 3);
}

/// Without kubectl-raft-proxy-post, etcd's status says which role grants the POST it needs.
#[test]
fn status_of_etcd_without_the_post_role_names_it() {
    let _nodes = shared_nodes();
    let ns = etcd_namespace("rbac-status-post");
    let who = RbacSubject::bound_to("kubectl-raft-status", &ns.name);
    let (code, _, err) = who.raft(&["status", "etcd", "-n", &ns.name]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("create")
            && err.contains("pods/proxy")
            && err.contains("kubectl-raft-proxy-post"),
        "{err}"
    );
}

#[test]
fn status_without_a_required_permission_names_it() {
    let _nodes = shared_nodes();
    let ns = etcd_namespace("rbac-status-minus");
    let who = RbacSubject::bound_to("kubectl-raft-status", &ns.name).and("kubectl-raft-proxy-post");
    who.each_required_right_is_named(
        STATUS_OPTIONAL,
        &["status", "etcd", "-n", &ns.name],
        &String::new,
    );
}

#[test]
fn yield_runs_with_exactly_its_role() {
    let _nodes = shared_nodes();
    let ns = etcd_namespace("rbac-yield");
    let (leader, _) = etcd_leader(&ns.name).expect("a leader");
    let who = RbacSubject::bound_to("kubectl-raft-yield", &ns.name).with_lock();
    let (code, out, err) = who.raft(&["yield", "etcd", "-n", &ns.name, "-o", "json"]);
    assert_eq!(code, Some(0), "{err}\n{out}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["leader"], leader, "{report:#}");
    assert_eq!(report["outcome"], "Transferred", "{report:#}");
    assert_ne!(report["newLeader"], leader, "{report:#}");
}

#[test]
fn yield_without_a_required_permission_names_it_and_moves_nothing() {
    let _nodes = shared_nodes();
    let ns = etcd_namespace("rbac-yield-minus");
    let who = RbacSubject::bound_to("kubectl-raft-yield", &ns.name).with_lock();
    let leader = || format!("leader {:?}", etcd_leader(&ns.name).map(|l| l.0));
    who.each_required_right_is_named(YIELD_OPTIONAL, &["yield", "etcd", "-n", &ns.name], &leader);
}

/// `yield --allow-election` (ZooKeeper cannot transfer): bound to the yield role and
/// kubectl-raft-yield-election, it holds the election; without any one of their required
/// rights it stops before deleting anything and names the right.
#[test]
fn yield_allow_election_needs_exactly_its_two_roles() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("rbac-elect");
    deploy_zookeeper(&ns.name);
    let who = RbacSubject::bound_to("kubectl-raft-yield", &ns.name)
        .and("kubectl-raft-yield-election")
        .with_lock();
    let args = [
        "yield",
        "zk",
        "-n",
        &ns.name,
        "--allow-election",
        "--timeout",
        "60s",
    ];
    let optional: Vec<(&str, &str, &str)> = YIELD_OPTIONAL
        .iter()
        .copied()
        .chain([("create", "pods/proxy", "ZooKeeper is asked with GETs only")])
        .collect();
    who.each_required_right_is_named(&optional, &args, &|| format!("{:?}", uids(&ns.name)));
    let (code, out, err) = who.raft(&args);
    assert_eq!(code, Some(0), "{err}\n{out}");
    assert!(err.contains("expect an election"), "{err}");
}

/// `--via port-forward`: the status role and kubectl-raft-port-forward are enough, and
/// without `create pods/portforward` the message names it.
#[test]
fn status_via_port_forward_needs_exactly_its_two_roles() {
    let _nodes = shared_nodes();
    let ns = etcd_namespace("rbac-pf");
    let who = RbacSubject::bound_to("kubectl-raft-status", &ns.name)
        .and("kubectl-raft-port-forward")
        .and("kubectl-raft-proxy-post");
    let args = ["status", "etcd", "-n", &ns.name, "--via", "port-forward"];
    let optional: Vec<(&str, &str, &str)> = STATUS_OPTIONAL
        .iter()
        .copied()
        .chain([
            (
                "get",
                "pods/proxy",
                "--via port-forward does not use pods/proxy",
            ),
            (
                "create",
                "pods/proxy",
                "--via port-forward does not use pods/proxy (kubectl-raft-proxy-post)",
            ),
            (
                "create",
                "pods/portforward",
                "the world's API server (1.34) authorizes a WebSocket port-forward as get only",
            ),
        ])
        .collect();
    who.each_required_right_is_named(&optional, &args, &String::new);
    let (code, out, err) = who.raft(&args);
    assert_eq!(code, Some(0), "{err}\n{out}");
    assert!(out.contains("3/3 voters healthy"), "{out}");
}

/// `status --watch` keeps the Kubernetes objects with watches where the role allows it; a
/// user without `watch` is told so and the watch still runs, listing them every round.
#[test]
fn status_watch_without_the_watch_right_says_so_and_lists_instead() {
    let _nodes = shared_nodes();
    let ns = etcd_namespace("rbac-watch");
    let who = RbacSubject::bound_to("kubectl-raft-status", &ns.name).and("kubectl-raft-proxy-post");
    let watch = |who: &RbacSubject| {
        let kc = who.kubeconfig.to_str().unwrap().to_string();
        let mut w = Running::start_env(
            &[("KUBECONFIG", &kc)],
            &[
                "status",
                "etcd",
                "-n",
                &ns.name,
                "--watch",
                "--interval",
                "500ms",
            ],
        );
        w.wait_for("watching 1 cluster(s)", std::time::Duration::from_secs(60));
        signal(w.pid(), "INT");
        w.finish(std::time::Duration::from_secs(30))
    };
    let (code, _, err) = watch(&who);
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("listing them every round"), "{err}");
    who.without("watch", "pods");
    let (code, _, err) = watch(&who);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("may not watch pods") && err.contains("listing them every round instead"),
        "{err}"
    );
}

/// What the gate's roles (docs/gate.yaml) grant that a dry-run decision about a follower
/// does without, and why; each is exercised elsewhere.
const GATE_OPTIONAL: &[(&str, &str, &str)] = &[
    (
        "get",
        "namespaces",
        "run with --webhook \"\": no webhook to read the opt-in from (tests/e2e/gate.rs: a forged review in a namespace the webhook does not select)",
    ),
    (
        "create",
        "events",
        "an allowed dry run records no Event (tests/e2e/gate.rs: Events of refusals and transfers)",
    ),
    ("patch", "events", "an allowed dry run records no Event"),
    (
        "get",
        "validatingwebhookconfigurations",
        "run with --webhook \"\" (tests/e2e/gate.rs: the installed gate puts its CA into its webhook)",
    ),
    (
        "update",
        "validatingwebhookconfigurations",
        "run with --webhook \"\"",
    ),
    (
        "update",
        "secrets",
        "only when the serving certificate is issued again (tests/e2e/gate.rs: renewal)",
    ),
    (
        "create",
        "leases",
        "a dry run writes no record (tests/e2e/gate.rs: the installed gate's two replicas write it)",
    ),
    ("update", "leases", "a dry run writes no record"),
];

/// `kubectl-raft gate serve` as a ServiceAccount bound to copies of docs/gate.yaml's two
/// roles, with its TLS Secret issued afresh: Some(the answer to a follower's dry-run
/// eviction), or None and what it said when it could not start.
fn gate_as(who: &RbacSubject, ns: &str, follower: &str) -> (Option<Value>, String) {
    let secret = format!("gate-tls-{ns}");
    let _ = kubectl(&[
        "delete",
        "secret",
        &secret,
        "-n",
        GATE_NS,
        "--ignore-not-found",
    ]);
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let kc = who.kubeconfig.to_str().unwrap().to_string();
    let mut gate = Running::start_env(
        &[("KUBECONFIG", &kc)],
        &[
            "gate",
            "serve",
            "-n",
            GATE_NS,
            "--listen",
            &listen,
            "--tls-name",
            "127.0.0.1",
            "--tls-secret",
            &secret,
            "--webhook",
            "",
            "--lock-namespace",
            LOCK_NS,
            "--via",
            "direct",
            "--shutdown-delay",
            "0s",
        ],
    );
    let serving = gate.says_or_exits("serving on", std::time::Duration::from_secs(60));
    let answer = serving.then(|| review(port, ns, follower, true));
    if serving {
        signal(gate.pid(), "TERM");
    }
    let (_, _, said) = gate.finish(std::time::Duration::from_secs(15));
    (answer, said)
}

/// The gate's roles from docs/gate.yaml are enough for it to decide (a follower's eviction
/// allowed), and every right they grant is needed: without any one that is not listed as
/// optional, the gate does not start or refuses (429, never allowed), and what it says names
/// the right. Nothing is evicted either way (dry run).
#[test]
fn the_gate_decides_with_exactly_its_roles_and_fails_closed_without_any_of_them() {
    let _nodes = shared_nodes();
    let ns = etcd_namespace("rbac-gate");
    let (leader, _) = etcd_leader(&ns.name).expect("a leader");
    let follower = others_than(&leader, "etcd", 3).remove(0);
    let who = RbacSubject::account(&ns.name)
        .and_from("docs/gate.yaml", "ClusterRole", "kubectl-raft-gate")
        .and_from("docs/gate.yaml", "Role", "kubectl-raft-gate")
        .and_from("docs/rbac.yaml", "Role", "kubectl-raft-gate-reads-locks");
    let (answer, said) = gate_as(&who, &ns.name, &follower);
    let answer = answer.unwrap_or_else(|| panic!("the gate did not start: {said}"));
    assert_eq!(answer["allowed"], true, "{answer:#}\n{said}");

    let before = uids(&ns.name);
    let mut wrong = vec![];
    for (verb, resource) in who.grants() {
        if GATE_OPTIONAL
            .iter()
            .any(|(v, r, _)| *v == verb && *r == resource)
        {
            continue;
        }
        who.without(&verb, &resource);
        let (answer, said) = gate_as(&who, &ns.name, &follower);
        who.restore(&verb, &resource);
        let right = format!("{verb} {resource}");
        let names = |text: &str| names_right(text, &verb, &resource);
        match answer {
            None if names(&said) => {}
            None => wrong.push(format!(
                "without {right} it stopped without naming it: {said}"
            )),
            Some(a) if a["allowed"] == true => wrong.push(format!(
                "without {right} it still allowed the eviction: the right is not needed"
            )),
            Some(a) => {
                let message = a["status"]["message"].as_str().unwrap_or("");
                if a["status"]["code"] != 429 {
                    wrong.push(format!("without {right} it answered {a}, not a 429"));
                } else if !names(message) && !names(&said) {
                    wrong.push(format!(
                        "without {right} the refusal does not name it: {a}\n{said}"
                    ));
                }
            }
        }
    }
    assert_eq!(uids(&ns.name), before, "nothing was evicted");
    assert!(
        wrong.is_empty(),
        "the gate with each right of docs/gate.yaml's roles taken away:\n{}",
        wrong.join("\n---\n")
    );
}

#[test]
fn a_subresource_does_not_name_its_resource() {
    let err =
        r#"pods "etcd-0" is forbidden: User "u" cannot get resource "pods/proxy" in API group """#;
    assert!(names_right(err, "get", "pods/proxy"));
    assert!(!names_right(err, "get", "pods"));
    assert!(!names_right(err, "create", "pods/proxy"));
    let ours = "error: forbidden: this user may not get leases.coordination.k8s.io in namespace x";
    assert!(names_right(ours, "get", "leases"));
    let ours = "error: forbidden: this user may not get pods/proxy in namespace x";
    assert!(!names_right(ours, "get", "pods"));
}

/// Where docs/gate.yaml's gate keeps its records: the namespace it runs in (its `--namespace=`).
fn gate_records_namespace() -> String {
    let text = std::fs::read_to_string(repo().join("docs/gate.yaml")).unwrap();
    let arg = text
        .split(|c: char| c == ',' || c == '[' || c == ']' || c.is_whitespace())
        .find_map(|w| w.strip_prefix("--namespace="))
        .expect("docs/gate.yaml runs the gate with --namespace=");
    arg.to_string()
}

/// A Lease `name` in `ns`, written by the admin (a record, or a lock).
fn admin_lease(ns: &str, name: &str) {
    let lease = format!(
        r#"{{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{{"name":"{name}","namespace":"{ns}"}},"spec":{{"holderIdentity":"admin"}}}}"#
    );
    kubectl_ok(&["apply", "-f", tempfile(&lease).path_str()]);
}

/// `who` trying to create, update and delete Leases in `ns` (`existing` is there): the
/// attempts that were not refused.
fn lease_writes_let_through(
    who: &RbacSubject,
    ns: &str,
    existing: &str,
    tag: &str,
) -> Vec<&'static str> {
    let planted = format!("planted-{tag}");
    let lease = format!(
        r#"{{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{{"name":"{planted}","namespace":"{ns}"}},"spec":{{"holderIdentity":"mallory","leaseDurationSeconds":86400}}}}"#
    );
    let file = tempfile(&lease);
    // An update is a PUT (`kubectl replace`), as the gate and the locks write: `kubectl
    // annotate` would PATCH, a verb neither role grants.
    let replaced = format!(
        r#"{{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{{"name":"{existing}","namespace":"{ns}","annotations":{{"kubectl-raft.io/gate-record":"{{}}"}}}},"spec":{{"holderIdentity":"mallory","leaseDurationSeconds":86400}}}}"#
    );
    let replacement = tempfile(&replaced);
    let attempts: [(&str, Vec<&str>); 3] = [
        ("create", vec!["create", "-f", file.path_str()]),
        ("update", vec!["replace", "-f", replacement.path_str()]),
        ("delete", vec!["delete", "lease", "-n", ns, existing]),
    ];
    let mut through = vec![];
    for (what, args) in attempts {
        match who.kubectl(&args) {
            Ok(_) => through.push(what),
            Err(e) if e.contains("forbidden") => {}
            Err(e) => panic!("{what} failed, but not as refused: {e}"),
        }
    }
    let _ = kubectl(&["delete", "lease", "-n", ns, &planted, "--ignore-not-found"]);
    through
}

/// The gate's records are its own: an operator bound to docs/rbac.yaml's lock Role (whoever
/// drains, restarts or yields) writes locks (the positive control) but can neither create,
/// update nor delete a Lease where docs/gate.yaml's gate keeps its records, so no operator can
/// erase a cluster's rejoin hold or plant a record. (Before, the records shared the lock
/// namespace, and all three went through.)
#[test]
fn the_lock_role_cannot_touch_the_gates_records() {
    let ns = TestNamespace::new("rbac-records");
    let records = gate_records_namespace();
    let record = format!("kubectl-raft-gate.{}.etcd", ns.name);
    admin_lease(&records, &record);
    let operator = RbacSubject::account(&ns.name).with_lock();
    let lock = lock_lease(&ns.name, "etcd");
    let own = lease_writes_let_through(&operator, LOCK_NS, &lock_after(&lock), &ns.name);
    assert_eq!(
        own,
        ["create", "update", "delete"],
        "the lock Role writes locks"
    );
    let through = lease_writes_let_through(&operator, &records, &record, &ns.name);
    let _ = kubectl(&[
        "delete",
        "lease",
        "-n",
        &records,
        &record,
        "--ignore-not-found",
    ]);
    assert!(
        through.is_empty(),
        "the lock Role wrote in {records}, where the gate keeps its records: {through:?}"
    );
}

/// The lock `name` in the lock namespace, written by the admin first: its name.
fn lock_after(name: &str) -> String {
    admin_lease(LOCK_NS, name);
    name.to_string()
}

/// The gate reads drain's and restart's locks and cannot write them: bound to docs/gate.yaml's
/// roles and docs/rbac.yaml's kubectl-raft-gate-reads-locks, it reads a lock (the positive
/// control) and writes a record in its own namespace, but can neither create, update nor
/// delete a Lease in the lock namespace. (Before, its Role granted create and update there.)
#[test]
fn the_gates_roles_cannot_write_the_locks() {
    let ns = TestNamespace::new("rbac-gate-locks");
    let lock = lock_after(&lock_lease(&ns.name, "etcd"));
    let gate = RbacSubject::account(&ns.name)
        .and_from("docs/gate.yaml", "ClusterRole", "kubectl-raft-gate")
        .and_from("docs/gate.yaml", "Role", "kubectl-raft-gate")
        .and_from("docs/rbac.yaml", "Role", "kubectl-raft-gate-reads-locks");
    gate.kubectl(&["get", "lease", "-n", LOCK_NS, &lock])
        .expect("the gate reads a lock");
    let records = gate_records_namespace();
    let record = format!("kubectl-raft-gate.{}.etcd", ns.name);
    admin_lease(&records, &record);
    let own = lease_writes_let_through(&gate, &records, &record, &ns.name);
    assert_eq!(own, ["create", "update"], "the gate writes its records");
    let through = lease_writes_let_through(&gate, LOCK_NS, &lock, &ns.name);
    let _ = kubectl(&[
        "delete",
        "lease",
        "-n",
        LOCK_NS,
        &lock,
        "--ignore-not-found",
    ]);
    assert!(
        through.is_empty(),
        "the gate wrote in the lock namespace {LOCK_NS}: {through:?}"
    );
}

/// Without docs/rbac.yaml's kubectl-raft-gate-reads-locks (an install of docs/gate.yaml alone,
/// where the lock namespace exists), the gate cannot tell whether a drain holds a cluster's
/// lock: it refuses (429) naming the right, never allows as if there were no lock.
#[test]
fn the_gate_without_its_right_to_read_the_locks_refuses_naming_it() {
    let _nodes = shared_nodes();
    let ns = etcd_namespace("rbac-gate-nolocks");
    let (leader, _) = etcd_leader(&ns.name).expect("a leader");
    let follower = others_than(&leader, "etcd", 3).remove(0);
    let who = RbacSubject::account(&ns.name)
        .and_from("docs/gate.yaml", "ClusterRole", "kubectl-raft-gate")
        .and_from("docs/gate.yaml", "Role", "kubectl-raft-gate");
    let (answer, said) = gate_as(&who, &ns.name, &follower);
    let answer = answer.unwrap_or_else(|| panic!("the gate did not start: {said}"));
    assert_eq!(answer["status"]["code"], 429, "{answer:#}\n{said}");
    let message = answer["status"]["message"].as_str().unwrap_or_default();
    assert!(
        names_right(message, "get", "leases")
            && message.contains(&format!("the namespace \"{LOCK_NS}\"")),
        "{answer:#}"
    );
}
