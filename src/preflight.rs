//! Before a command that changes things (drain, restart) changes anything: does this user
//! have every permission it will need on the way? One `SelfSubjectAccessReview` per
//! permission, all at once; a missing one stops the command before the first cordon or
//! eviction, naming every missing permission and what it is for, rather than half-way
//! through with a node cordoned and a member gone.

use anyhow::{bail, Result};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

/// One permission a command needs.
#[derive(Debug, Clone)]
pub struct Need {
    pub verb: &'static str,
    pub group: &'static str,
    /// `pods`, or `pods/eviction` for a subresource.
    pub resource: &'static str,
    /// `None`: in every namespace (or a cluster-scoped resource).
    pub namespace: Option<String>,
    /// One object by name (`None`: any).
    pub name: Option<String>,
    /// What it is needed for, in the user's words.
    pub why: &'static str,
}

impl Need {
    pub fn new(verb: &'static str, resource: &'static str, why: &'static str) -> Need {
        Need {
            verb,
            group: "",
            resource,
            namespace: None,
            name: None,
            why,
        }
    }

    pub fn named(mut self, name: &str) -> Need {
        self.name = Some(name.to_string());
        self
    }

    pub fn group(mut self, group: &'static str) -> Need {
        self.group = group;
        self
    }

    pub fn in_namespace(mut self, ns: &str) -> Need {
        self.namespace = Some(ns.to_string());
        self
    }

    pub fn describe(&self) -> String {
        let resource = if self.group.is_empty() {
            self.resource.to_string()
        } else {
            match self.resource.split_once('/') {
                Some((r, sub)) => format!("{r}.{}/{sub}", self.group),
                None => format!("{}.{}", self.resource, self.group),
            }
        };
        let place = match &self.namespace {
            Some(ns) => format!("in namespace {ns}"),
            None => "in every namespace".to_string(),
        };
        format!("{} {resource} {place} ({})", self.verb, self.why)
    }
}

/// What taking members out one at a time needs, in `ns` (None: every namespace): evicting
/// (or deleting, with --disable-eviction) pods, waiting for them to go and their replacements
/// to be Ready, asking members to hand over leadership; and the lock's Leases in `lock_ns`.
pub fn member_steps(ns: Option<&str>, disable_eviction: bool, lock_ns: &str) -> Vec<Need> {
    let mut needs = vec![
        if disable_eviction {
            Need::new("delete", "pods", "delete pods (--disable-eviction)")
        } else {
            Need::new("create", "pods/eviction", "evict pods")
        },
        Need::new("get", "pods", "read pods again before each step"),
        Need::new(
            "watch",
            "pods",
            "wait for a pod to go and its replacement to be Ready",
        ),
        Need::new("get", "pods/proxy", "ask members their state"),
        Need::new("create", "pods/proxy", "ask a leader to hand over"),
    ];
    if let Some(ns) = ns {
        needs = needs.into_iter().map(|n| n.in_namespace(ns)).collect();
    }
    needs.extend(lock_steps(lock_ns));
    needs
}

/// What keeping a cluster's lock takes (drain, restart, yield): a Lease in `lock_ns`.
pub fn lock_steps(lock_ns: &str) -> Vec<Need> {
    [
        ("get", "read the cluster's lock"),
        ("create", "take the cluster's lock"),
        ("update", "renew the cluster's lock"),
        ("delete", "release the cluster's lock"),
    ]
    .into_iter()
    .map(|(verb, why)| {
        Need::new(verb, "leases", why)
            .group("coordination.k8s.io")
            .in_namespace(lock_ns)
    })
    .collect()
}

/// Asks the API server about every need at once. Missing permissions are an error naming
/// them all; when the API server cannot be asked (SelfSubjectAccessReview refused or failed),
/// `on_unknown` hears why and the command goes on (each call still names its own refusal).
pub async fn check(
    client: &kube::Client,
    command: &str,
    needs: &[Need],
    on_unknown: &(dyn Fn(&str) + Sync),
) -> Result<()> {
    let missing = match missing(client, needs).await {
        Ok(m) => m,
        Err(why) => {
            on_unknown(&format!("{why}; going on"));
            return Ok(());
        }
    };
    if !missing.is_empty() {
        bail!(
            "forbidden: this user may not {}; {command} stopped before changing anything. \
             Grant them (docs/rbac.yaml has the roles; check one with `kubectl auth can-i VERB RESOURCE`)",
            missing
                .iter()
                .map(|n| n.describe())
                .collect::<Vec<_>>()
                .join("; nor ")
        );
    }
    Ok(())
}

/// The needs the API server says this user does not have (one SelfSubjectAccessReview each,
/// all at once); why not, when it could not be asked.
pub async fn missing<'a>(
    client: &kube::Client,
    needs: &'a [Need],
) -> Result<Vec<&'a Need>, String> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let answers = futures::future::join_all(needs.iter().map(|n| {
        let api = api.clone();
        async move {
            let (resource, subresource) = match n.resource.split_once('/') {
                Some((r, s)) => (r, Some(s.to_string())),
                None => (n.resource, None),
            };
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        verb: Some(n.verb.into()),
                        group: Some(n.group.into()),
                        resource: Some(resource.into()),
                        subresource,
                        namespace: n.namespace.clone(),
                        name: n.name.clone(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            };
            api.create(&PostParams::default(), &review)
                .await
                .map(|r| r.status.is_some_and(|s| s.allowed))
        }
    }))
    .await;
    let mut out = vec![];
    for (need, answer) in needs.iter().zip(answers) {
        match answer {
            Ok(true) => {}
            Ok(false) => out.push(need),
            Err(e) => {
                return Err(format!(
                    "could not check in advance whether this user may {}: {}",
                    need.describe(),
                    crate::errors::chain(&e)
                ))
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_need_is_described_as_kubectl_auth_can_i_names_it() {
        assert_eq!(
            Need::new("create", "pods/eviction", "evict pods").describe(),
            "create pods/eviction in every namespace (evict pods)"
        );
        assert_eq!(
            Need::new("update", "leases", "renew the lock")
                .group("coordination.k8s.io")
                .in_namespace("kubectl-raft")
                .describe(),
            "update leases.coordination.k8s.io in namespace kubectl-raft (renew the lock)"
        );
    }
}
