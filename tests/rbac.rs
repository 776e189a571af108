//! Least privilege, end to end: each verb runs as a ServiceAccount bound to exactly its
//! ClusterRole from docs/rbac.yaml, and with one required permission taken away it fails
//! with a message that names that permission. (drain's are in tests/drain.rs, which holds
//! the nodes.)

mod common;

use common::*;
use serde_json::Value;

/// The permissions `status` cannot do without (docs/rbac.yaml marks the optional ones).
const STATUS_NEEDS: &[(&str, &str)] = &[
    ("list", "pods"),
    ("list", "statefulsets"),
    ("list", "services"),
    ("list", "endpointslices"),
    ("list", "poddisruptionbudgets"),
    ("get", "pods/proxy"),
    ("create", "pods/proxy"),
];

fn etcd_namespace(prefix: &str) -> TestNamespace {
    let ns = TestNamespace::new(prefix);
    deploy_etcd(&ns.name, 3);
    ns
}

/// Runs `args` as `who` with `verb` on `resource` taken away, and checks it fails naming it.
fn refused_without(who: &RbacSubject, verb: &str, resource: &str, args: &[&str]) {
    who.without(verb, resource);
    let (code, out, err) = who.raft(args);
    who.restore();
    assert_eq!(
        code,
        Some(1),
        "without {verb} {resource}, `kubectl raft {}` succeeded:\n{out}{err}",
        args.join(" ")
    );
    assert!(
        err.contains("forbidden") && err.contains(verb) && err.contains(resource),
        "without {verb} {resource} the message does not name it: {err}"
    );
}

#[test]
fn status_runs_with_exactly_its_role() {
    let _nodes = shared_nodes();
    let ns = etcd_namespace("rbac-status");
    let who = RbacSubject::bound_to("kubectl-raft-status", &ns.name);
    let (code, out, err) = who.raft(&["status", "-n", &ns.name, "-o", "json"]);
    assert_eq!(code, Some(0), "{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    let c = cluster(&report, &ns.name);
    assert!(c["summary"]["leader"].is_string(), "{c:#}");
    assert_eq!(c["summary"]["faultTolerance"], 1, "{c:#}");
}

#[test]
fn status_without_a_required_permission_names_it() {
    let _nodes = shared_nodes();
    let ns = etcd_namespace("rbac-status-minus");
    let who = RbacSubject::bound_to("kubectl-raft-status", &ns.name);
    for (verb, resource) in STATUS_NEEDS {
        refused_without(&who, verb, resource, &["status", "-n", &ns.name]);
    }
}

#[test]
fn yield_runs_with_exactly_its_role() {
    let _nodes = shared_nodes();
    let ns = etcd_namespace("rbac-yield");
    let (leader, _) = etcd_leader(&ns.name).expect("a leader");
    let who = RbacSubject::bound_to("kubectl-raft-yield", &ns.name);
    let (code, out, err) = who.raft(&["yield", "etcd", "-n", &ns.name, "-o", "json"]);
    assert_eq!(code, Some(0), "{err}\n{out}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["leader"], leader, "{report:#}");
    assert_eq!(report["outcome"], "Transferred", "{report:#}");
    assert_ne!(report["newLeader"], leader, "{report:#}");
}

#[test]
fn yield_without_the_transfer_permission_names_it() {
    let _nodes = shared_nodes();
    let ns = etcd_namespace("rbac-yield-minus");
    let who = RbacSubject::bound_to("kubectl-raft-yield", &ns.name);
    refused_without(
        &who,
        "create",
        "pods/proxy",
        &["yield", "etcd", "-n", &ns.name],
    );
}
