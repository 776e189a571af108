//! Least privilege as the tests check it: a ServiceAccount bound to copies of the documented
//! roles (docs/rbac.yaml, docs/gate.yaml), each right taken away in turn.

use super::*;

/// A ServiceAccount of a test namespace bound to copies of roles from docs/rbac.yaml (its
/// verb's ClusterRole cluster-wide, optional ClusterRoles, the lock Role in the lock
/// namespace), and a kubeconfig that authenticates as it. The copies are the test's own, so
/// rules can be taken away without touching other tests; they and their bindings go when the
/// test ends.
pub struct RbacSubject {
    pub kubeconfig: PathBuf,
    pub sa: String,
    ns: String,
    roles: Vec<Bound>,
}

/// One role copy bound to the subject.
struct Bound {
    role: Value,
    /// Where `kubectl auth can-i` checks its rules: the test namespace for ClusterRoles, the
    /// Role's own namespace for a Role.
    check_ns: String,
}

impl Bound {
    fn name(&self) -> &str {
        self.role["metadata"]["name"].as_str().unwrap()
    }

    fn namespace(&self) -> Option<&str> {
        self.role["metadata"]["namespace"].as_str()
    }

    fn grants(&self, verb: &str, resource: &str) -> bool {
        self.rule(verb, resource).is_some()
    }

    /// The first rule that grants `verb` on `resource`.
    fn rule(&self, verb: &str, resource: &str) -> Option<&Value> {
        self.role["rules"].as_array().unwrap().iter().find(|r| {
            r["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x == resource)
                && r["verbs"].as_array().unwrap().iter().any(|x| x == verb)
        })
    }

    /// What `kubectl auth can-i` asks to tell whether the authorizer grants `verb` on
    /// `resource` by this role: the verb, the resource, and the first of the rule's
    /// resourceNames if it has any (a rule kept to names grants nothing unnamed).
    fn probe(&self, verb: &str, resource: &str) -> Vec<String> {
        let name = self
            .rule(verb, resource)
            .and_then(|r| r["resourceNames"][0].as_str());
        [verb, resource]
            .into_iter()
            .chain(name)
            .map(str::to_string)
            .collect()
    }
}

/// The namespace of drain's and restart's locks (docs/rbac.yaml).
pub const LOCK_NS: &str = "kubectl-raft";

/// The eviction gate's own namespace (docs/gate.yaml): its Secret and its records.
pub const GATE_NS: &str = "kubectl-raft-gate";

/// The Lease that locks StatefulSet `sts` of namespace `ns` (in LOCK_NS).
pub fn lock_lease(ns: &str, sts: &str) -> String {
    format!("kubectl-raft.{ns}.{sts}")
}

/// An object of docs/rbac.yaml by name.
fn rbac_doc(name: &str) -> Value {
    rbac_doc_in("docs/rbac.yaml", None, name)
}

/// A role of file `file` (in the repository) by name, of `kind` where two kinds share it.
fn rbac_doc_in(file: &str, kind: Option<&str>, name: &str) -> Value {
    let docs = repo().join(file);
    // kubectl prints one JSON object per document.
    let text = kubectl_ok(&[
        "create",
        "--dry-run=client",
        "-o",
        "json",
        "-f",
        docs.to_str().unwrap(),
    ]);
    serde_json::Deserializer::from_str(&text)
        .into_iter::<Value>()
        .map(|r| r.expect("kubectl printed JSON"))
        .find(|r| {
            r["metadata"]["name"] == name
                && kind.map_or(r["kind"] != "Namespace", |k| r["kind"] == k)
        })
        .unwrap_or_else(|| panic!("{file} has no role {name}"))
}

/// `role`'s rules without `verb` on `resource`.
fn rules_without(role: &Value, verb: &str, resource: &str) -> Value {
    let mut rules = vec![];
    for rule in role["rules"].as_array().unwrap() {
        let strings = |k: &str| -> Vec<Value> { rule[k].as_array().unwrap().clone() };
        if !strings("resources").iter().any(|r| r == resource) {
            rules.push(rule.clone());
            continue;
        }
        let others: Vec<Value> = strings("resources")
            .into_iter()
            .filter(|r| r != resource)
            .collect();
        if !others.is_empty() {
            let mut r = rule.clone();
            r["resources"] = Value::Array(others);
            rules.push(r);
        }
        let verbs: Vec<Value> = strings("verbs").into_iter().filter(|v| v != verb).collect();
        if !verbs.is_empty() {
            let mut r = rule.clone();
            r["resources"] = Value::Array(vec![Value::String(resource.into())]);
            r["verbs"] = Value::Array(verbs);
            rules.push(r);
        }
    }
    let mut out = role.clone();
    out["rules"] = Value::Array(rules);
    out
}

impl RbacSubject {
    /// `role` is a ClusterRole name from docs/rbac.yaml, e.g. `kubectl-raft-status`.
    pub fn bound_to(role: &str, ns: &str) -> Self {
        Self::account(ns).and(role)
    }

    /// The ServiceAccount and its kubeconfig, bound to nothing yet.
    pub fn account(ns: &str) -> Self {
        let sa = "operator".to_string();
        kubectl_ok(&["create", "serviceaccount", &sa, "-n", ns]);
        let out = Command::new(world_dir().join("bin/kworld"))
            .args(["kubeconfig-for", ns, &sa])
            .output()
            .expect("kworld kubeconfig-for");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        RbacSubject {
            kubeconfig: PathBuf::from(String::from_utf8_lossy(&out.stdout).trim().to_string()),
            sa,
            ns: ns.to_string(),
            roles: vec![],
        }
    }

    /// Also bound to a copy of ClusterRole or Role `role` of docs/rbac.yaml (a Role in its own
    /// namespace: kubectl-raft-lock in the lock namespace, as docs/rbac.yaml says to bind it).
    pub fn and(self, role: &str) -> Self {
        let found = rbac_doc(role);
        self.and_role(found)
    }

    /// Also bound to a copy of the `kind` named `role` in `file` (docs/gate.yaml's
    /// ClusterRole and Role share one name).
    pub fn and_from(self, file: &str, kind: &str, role: &str) -> Self {
        let found = rbac_doc_in(file, Some(kind), role);
        self.and_role(found)
    }

    fn and_role(mut self, mut found: Value) -> Self {
        let role = found["metadata"]["name"].as_str().unwrap().to_string();
        let copy = format!("{role}-{}", self.ns);
        found["metadata"]["name"] = Value::String(copy.clone());
        let subject = format!("--serviceaccount={}:{}", self.ns, self.sa);
        let bound = match found["metadata"]["namespace"].as_str().map(str::to_string) {
            Some(role_ns) => {
                self.apply(&found);
                let role_ref = format!("--role={copy}");
                kubectl_ok(&[
                    "create",
                    "rolebinding",
                    &copy,
                    "-n",
                    &role_ns,
                    &role_ref,
                    &subject,
                ]);
                Bound {
                    role: found,
                    check_ns: role_ns,
                }
            }
            None => {
                self.apply(&found);
                let role_ref = format!("--clusterrole={copy}");
                kubectl_ok(&["create", "clusterrolebinding", &copy, &role_ref, &subject]);
                Bound {
                    role: found,
                    check_ns: self.ns.clone(),
                }
            }
        };
        let (verb, resource) = role_rule(&bound.role);
        self.wait_can(&bound.probe(&verb, &resource), &bound.check_ns, true);
        self.roles.push(bound);
        self
    }

    /// Also bound to the lock Role (drain and restart write their Leases there).
    pub fn with_lock(self) -> Self {
        self.and("kubectl-raft-lock")
    }

    fn apply(&self, role: &Value) {
        let f = tempfile(&role.to_string());
        kubectl_ok(&["apply", "-f", f.path_str()]);
    }

    /// Every (verb, resource) the subject's roles grant.
    pub fn grants(&self) -> Vec<(String, String)> {
        let mut out = vec![];
        for b in &self.roles {
            for rule in b.role["rules"].as_array().unwrap() {
                for r in rule["resources"].as_array().unwrap() {
                    for v in rule["verbs"].as_array().unwrap() {
                        out.push((v.as_str().unwrap().into(), r.as_str().unwrap().into()));
                    }
                }
            }
        }
        out
    }

    /// For every right the roles grant but `optional` (verb, resource, why it is optional):
    /// without it, `args` exits 1 with a message naming it, and `state` (what must not move:
    /// pods, a cordon, the leader) reads the same after as before. Each right is restored
    /// before the next is taken away.
    pub fn each_required_right_is_named(
        &self,
        optional: &[(&str, &str, &str)],
        args: &[&str],
        state: &dyn Fn() -> String,
    ) {
        let required: Vec<(String, String)> = self
            .grants()
            .into_iter()
            .filter(|(v, r)| !optional.iter().any(|(ov, or, _)| ov == v && or == r))
            .collect();
        let mut wrong = vec![];
        for (verb, resource) in &required {
            self.without(verb, resource);
            let before = state();
            let (code, out, err) = self.raft(args);
            let after = state();
            self.restore(verb, resource);
            let right = format!("{verb} {resource}");
            if code != Some(1) {
                wrong.push(format!("without {right} it exited {code:?}: {out}{err}"));
            } else if !names_right(&err, verb, resource) {
                wrong.push(format!(
                    "without {right} the message does not name it: {err}"
                ));
            }
            if before != after {
                wrong.push(format!(
                    "without {right} it changed {before} into {after}: {err}"
                ));
            }
        }
        assert!(
            wrong.is_empty(),
            "`kubectl raft {}` with each right taken away:\n{}",
            args.join(" "),
            wrong.join("\n---\n")
        );
    }

    /// The roles without `verb` on `resource` (e.g. "create", "pods/proxy"), until restored.
    pub fn without(&self, verb: &str, resource: &str) {
        let granting: Vec<&Bound> = self
            .roles
            .iter()
            .filter(|b| b.grants(verb, resource))
            .collect();
        assert!(!granting.is_empty(), "no role grants {verb} on {resource}");
        for b in &granting {
            self.apply(&rules_without(&b.role, verb, resource));
        }
        self.wait_can(
            &granting[0].probe(verb, resource),
            &granting[0].check_ns,
            false,
        );
    }

    /// The roles that `without(verb, resource)` changed, as docs/rbac.yaml has them again,
    /// once the authorizer grants that right again where each of them grants it.
    pub fn restore(&self, verb: &str, resource: &str) {
        let granting: Vec<&Bound> = self
            .roles
            .iter()
            .filter(|b| b.grants(verb, resource))
            .collect();
        for b in &granting {
            self.apply(&b.role);
        }
        for b in &granting {
            self.wait_can(&b.probe(verb, resource), &b.check_ns, true);
        }
    }

    /// Waits until the authorizer answers `kubectl auth can-i VERB RESOURCE[/NAME] -n NS` as
    /// the ServiceAccount with `allowed` (RBAC changes reach it through an informer).
    fn wait_can(&self, probe: &[String], ns: &str, allowed: bool) {
        let who = format!("system:serviceaccount:{}:{}", self.ns, self.sa);
        let (verb, resource) = (&probe[0], &probe[1]);
        let named = |base: &str| match probe.get(2) {
            Some(name) => format!("{base}/{name}"),
            None => base.to_string(),
        };
        wait_until(
            Duration::from_secs(30),
            &format!("can-i {verb} {resource} as {who} to be {allowed}"),
            || {
                // `pods/proxy` is a subresource; `kubectl auth can-i get pods/x` would name a pod.
                let (base, sub) = match resource.split_once('/') {
                    Some((b, s)) => (b, format!("--subresource={s}")),
                    None => (resource.as_str(), "--subresource=".to_string()),
                };
                let out = kubectl(&[
                    "auth",
                    "can-i",
                    verb,
                    &named(base),
                    &sub,
                    "-n",
                    ns,
                    "--as",
                    &who,
                ]);
                out.status.success() == allowed
            },
        );
    }

    /// The verb as this subject: (exit code, stdout, stderr).
    pub fn raft(&self, args: &[&str]) -> (Option<i32>, String, String) {
        let out = raft_with(&self.kubeconfig, args);
        (out.status.code(), stdout(&out), stderr(&out))
    }

    /// kubectl as the ServiceAccount: Ok(stdout), or Err(stderr) when refused.
    pub fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        let kc = self.kubeconfig.to_str().unwrap();
        let mut all = vec!["--kubeconfig", kc];
        all.extend_from_slice(args);
        let out = kubectl(&all);
        if out.status.success() {
            Ok(stdout(&out))
        } else {
            Err(stderr(&out))
        }
    }
}

/// A (verb, resource) the role grants (its first rule's first), to tell when the role has
/// reached the authorizer.
fn role_rule(role: &Value) -> (String, String) {
    let rule = &role["rules"][0];
    (
        rule["verbs"][0].as_str().unwrap().to_string(),
        rule["resources"][0].as_str().unwrap().to_string(),
    )
}

impl Drop for RbacSubject {
    fn drop(&mut self) {
        for b in &self.roles {
            let name = b.name();
            match b.namespace() {
                Some(ns) => {
                    for kind in ["rolebinding", "role"] {
                        let _ = kubectl(&["delete", kind, name, "-n", ns, "--wait=false"]);
                    }
                }
                None => {
                    for kind in ["clusterrolebinding", "clusterrole"] {
                        let _ = kubectl(&["delete", kind, name, "--wait=false"]);
                    }
                }
            }
        }
    }
}

/// Whether `text` names exactly the right `verb resource` as missing: the plugin's
/// "forbidden: this user may not VERB RESOURCE[.GROUP] ...", the API server's "forbidden: ...
/// cannot VERB resource \"RESOURCE\"", or the plugin's "without the right to VERB RESOURCE".
/// Exact: `get pods/proxy` does not name `get pods`.
pub fn names_right(text: &str, verb: &str, resource: &str) -> bool {
    let plugin = format!("may not {verb} {resource}");
    let by_plugin = text.match_indices(&plugin).any(|(at, m)| {
        matches!(
            text[at + m.len()..].chars().next(),
            None | Some(' ' | '.' | ',' | ';' | ')')
        )
    });
    (text.contains("forbidden")
        && (by_plugin || text.contains(&format!("cannot {verb} resource \"{resource}\""))))
        || text.contains(&format!("without the right to {verb} {resource}"))
}
