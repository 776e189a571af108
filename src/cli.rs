//! Every flag of the plugin, defined and documented in one place.
//!
//! kubectl refuses global flags placed before a plugin's name (`kubectl -n x raft`), so the
//! plugin parses the kubectl connection flags itself, with kubectl's names and meanings.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "kubectl-raft",
    bin_name = "kubectl raft",
    version,
    about = "Safe maintenance of Raft clusters (etcd, ClickHouse Keeper, ZooKeeper, NATS JetStream, Consul, Nomad, Vault, rqlite, spurctld) running as StatefulSets",
    long_about = "Safe maintenance of Raft clusters running as StatefulSets: etcd, ClickHouse Keeper, \
        ZooKeeper, NATS JetStream, Consul, Nomad, Vault, rqlite, spurctld, and any system a \
        profile describes (`kubectl raft systems`).\n\n\
        kubectl raft reads each replica's Raft state through the system's own health/HTTP port \
        (through the API server's pods/proxy by default, so it works wherever kubectl works) and \
        cross-checks it with what Kubernetes believes: pod readiness, probes, EndpointSlices, \
        PodDisruptionBudgets and nodes.",
    after_help = "A maintenance, in order:\n  \
        kubectl raft status -A                   # what every Raft cluster's members say, beside Kubernetes\n  \
        kubectl raft yield etcd -n db            # hand leadership over, and wait until it moved\n  \
        kubectl raft drain worker-3 --dry-run    # the plan: followers first, the leader last\n  \
        kubectl raft drain worker-3              # cordon, then evict one member at a time\n  \
        kubectl raft restart etcd -n db          # replace every member, one at a time\n  \
        kubectl raft gate manifests --image REF  # the eviction webhook: every evictor gets drain's decision\n\n\
Examples:\n  \
        kubectl raft status etcd -n db -o wide   # one StatefulSet, more columns\n  \
        kubectl raft status --node worker-3      # clusters with a replica on that node\n  \
        kubectl raft status etcd -o json         # the documented JSON schema (docs/status-schema.md)\n\n\
Connection flags (--kubeconfig, --context, -n) go after `raft`: kubectl passes a plugin only \
what follows its name."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Connection")]
pub struct GlobalArgs {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true, value_name = "PATH", value_hint = clap::ValueHint::FilePath)]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,

    /// Namespace to look in (default: the context's namespace).
    #[arg(short = 'n', long, global = true, value_name = "NAMESPACE")]
    pub namespace: Option<String>,

    /// How long to wait for one API server request, e.g. 10s, 1m (0 = no limit).
    #[arg(long, global = true, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub request_timeout: Duration,

    /// Username to impersonate for the operation, as kubectl's --as (a user, or a service
    /// account as system:serviceaccount:NAMESPACE:NAME). Replicas reached straight at their
    /// pods (--via direct) see no user at all.
    #[arg(long = "as", global = true, value_name = "USER")]
    pub as_user: Option<String>,

    /// Group to impersonate, as kubectl's --as-group; repeat it for several (needs --as).
    #[arg(long = "as-group", global = true, value_name = "GROUP")]
    pub as_group: Vec<String>,

    /// UID to impersonate, as kubectl's --as-uid (needs --as).
    #[arg(long = "as-uid", global = true, value_name = "UID")]
    pub as_uid: Option<String>,

    /// Log level, as kubectl's -v: 6 and up show every request (to the API server and to the
    /// replicas: method, where, status, time) on stderr; never a header, body or credential.
    #[arg(short = 'v', long = "v", global = true, value_name = "LEVEL", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=10))]
    pub verbosity: u8,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show each replica's Raft state next to what Kubernetes believes, and warn where they disagree.
    #[command(after_help = "Examples:\n  \
        kubectl raft status\n  \
        kubectl raft status etcd\n  \
        kubectl raft status sts/etcd -n db -o wide\n  \
        kubectl raft status -l app=keeper --system clickhouse-keeper\n  \
        kubectl raft status --via direct          # inside the cluster: talk to pod IPs directly\n\n\
        Exit status: 0 when the report was produced (even with warnings), 1 on an error.")]
    Status(StatusArgs),

    /// Hand Raft leadership to a healthy, caught-up member and wait until it has really happened.
    #[command(after_help = "Examples:\n  \
        kubectl raft yield etcd                    # to the best member, and wait\n  \
        kubectl raft yield etcd-1 --to etcd-2      # any replica names the cluster; --to picks the target\n  \
        kubectl raft yield sts/etcd --dry-run      # who leads, who would take over and why, the request\n  \
        kubectl raft yield zk --allow-election     # ZooKeeper cannot transfer: delete the leader, wait\n  \
        kubectl-raft yield --local --system etcd   # in a preStop hook: hand over if this replica leads\n\n\
        Exit status: 0 when leadership moved as asked (or, with --local, this replica does not lead);\n\
        1 when it refused, failed, went elsewhere or timed out (the last observations are printed).")]
    Yield(YieldArgs),

    /// Drain nodes the Raft-aware way: followers first, the leader last after a verified
    /// transfer, never below a quorum of healthy voters, each replacement rejoined first.
    #[command(after_help = "Examples:\n  \
        kubectl raft drain worker-3 --ignore-daemonsets            # cordon, then move everything off\n  \
        kubectl raft drain worker-3 worker-4 --dry-run             # the plan, the blockers, what each PDB answers\n  \
        kubectl raft drain -l pool=old --ignore-daemonsets --delete-emptydir-data\n  \
        kubectl raft drain worker-3 --allow-degraded               # a member pinned to the node goes anyway\n\n\
        Ordinary pods are treated as `kubectl drain` treats them. Raft clusters with a replica on the\n\
        nodes go one member at a time: followers first, the leader last after `yield`; before each\n\
        eviction the others must still form a quorum of healthy, caught-up voters, and after it the\n\
        replacement must be Ready and rejoined. The nodes stay cordoned when it stops; running the\n\
        same command again resumes.\n\n\
        Exit status: 0 when every node is drained (or, with --dry-run, nothing blocks the plan);\n\
        1 when it refused or stopped (what was done and what is left are printed).")]
    Drain(DrainArgs),

    /// Restart a Raft StatefulSet's members one at a time: followers first, the leader last
    /// after a verified transfer to a restarted member, each caught up before the next.
    #[command(after_help = "Examples:\n  \
        kubectl raft restart etcd -n db                   # every member, in the safe order\n  \
        kubectl raft restart sts/etcd -n db --dry-run     # the order, the transfer, what each step leaves\n  \
        kubectl raft restart -l tier=raft -A --dry-run    # every matching StatefulSet, one after another\n\n\
        Each member is evicted (PodDisruptionBudgets are honoured) and recreated by its controller.\n\
        Before each step the others must form a quorum of healthy, caught-up voters; after it the\n\
        replacement must be Ready and rejoined. A restart records its members on its lock's Lease\n\
        (raft.kubectl.io/restart-pending, their pod UIDs): running it again after it stopped\n\
        resumes, and the record is removed when it is done. An OnDelete StatefulSet with members at an older\n\
        revision is updated the same way; leadership never goes to a member still at the old one.\n\
        Shares drain's lock: a drain and a restart of one cluster never interleave.\n\n\
        Exit status: 0 when every member was restarted (or, with --dry-run, nothing blocks the plan);\n\
        1 when it refused or stopped (what was done and what is left are printed).")]
    Restart(RestartArgs),

    /// Print a shell completion script (bash, zsh, fish, powershell).
    #[command(after_help = "Examples:\n  \
        source <(kubectl-raft completion bash)                      # this shell\n  \
        kubectl-raft completion bash > /etc/bash_completion.d/kubectl-raft\n  \
        kubectl-raft completion zsh > \"${fpath[1]}/_kubectl-raft\"\n  \
        kubectl-raft completion fish > ~/.config/fish/completions/kubectl-raft.fish")]
    Completion(CompletionArgs),

    /// Print the version, the git commit it was built from and the Kubernetes API it speaks.
    Version(VersionArgs),

    /// List the Raft systems kubectl raft recognises (built-in profiles plus --profiles FILE).
    Systems(SystemsArgs),

    /// Copy this binary to PATH (a file, or a directory to hold `kubectl-raft`): for an init
    /// container that puts it on a volume shared with the Raft container, for `yield --local`.
    #[command(after_help = "Examples:\n  \
        kubectl-raft copy-to /raft      # in an init container of the kubectl-raft image\n\n\
        The image holds nothing but this binary (no shell, no cp); see docs/yield.md.")]
    CopyTo(CopyArgs),

    /// The eviction gate: an admission webhook that gives every evictor (plain kubectl drain,
    /// cluster-autoscaler, Karpenter, node upgrades) the decision `kubectl raft drain` makes.
    #[command(after_help = "Examples:\n  \
        kubectl-raft gate serve --via=direct --metrics-listen=0.0.0.0:9090   # as gate manifests runs it\n  \
        kubectl-raft gate serve --listen 127.0.0.1:9443 --tls-name 127.0.0.1 --webhook my-gate\n\n\
        Install it from what `gate manifests` prints for your image, then, with a replica\n\
        Ready, opt a namespace in:\n  \
        kubectl raft gate manifests --image REGISTRY/kubectl-raft:v0.1.0 --allow-from CIDR > gate.yaml\n  \
        kubectl apply -f docs/rbac.yaml -f gate.yaml\n  \
        kubectl -n kubectl-raft-gate wait --for=condition=Available deployment/kubectl-raft-gate --timeout=5m\n  \
        kubectl label namespace db kubectl-raft.io/gate=enabled\n\n\
        See docs/gate.md: what it allows, what it refuses (429, retried by every evictor), and\n\
        what happens when it is down.")]
    Gate(GateArgs),
}

#[derive(Debug, Args, Clone)]
pub struct GateArgs {
    #[command(subcommand)]
    pub command: GateCommand,
}

#[derive(Debug, Subcommand, Clone)]
pub enum GateCommand {
    /// Serve the admission webhook (HTTPS) and its /healthz and /readyz; /metrics on
    /// --metrics-listen (plain HTTP) when given, else beside them.
    Serve(Box<GateServeArgs>),

    /// Print the manifests that install the gate (namespace, roles, Deployment, PDB, Service,
    /// NetworkPolicy, webhook) for your image; docs/gate.yaml is this for the release image.
    #[command(after_help = "Examples:\n  \
        kubectl raft gate manifests --image registry.example.com/kubectl-raft:v0.1.0 \\\n      \
        --allow-from 10.0.0.0/24 > gate.yaml\n  \
        kubectl raft gate manifests --image registry.example.com/kubectl-raft:v0.1.0 --mode warn\n\n\
        Then, in this order (no eviction fails while no replica answers):\n  \
        kubectl apply -f docs/rbac.yaml -f gate.yaml\n  \
        kubectl -n kubectl-raft-gate wait --for=condition=Available deployment/kubectl-raft-gate --timeout=5m\n  \
        kubectl label namespace db kubectl-raft.io/gate=enabled\n\n\
        Nothing is sent to the cluster. -n names the gate's namespace (default kubectl-raft-gate).\n\
        See docs/gate.md: the control plane's addresses per platform, trial modes, removal.")]
    Manifests(GateManifestsArgs),
}

/// `gate manifests`: what the gate is installed with.
#[derive(Debug, Args, Clone)]
pub struct GateManifestsArgs {
    /// The image the gate's replicas run (the release image, pushed to your registry).
    #[arg(long, value_name = "REF")]
    pub image: String,

    /// How the gate acts: enforce, or a trial that refuses nothing (warn: an admission
    /// warning and an Event for what it would refuse; audit: an Event and a metric only).
    #[arg(long, value_enum, default_value_t = GateMode::Enforce)]
    pub mode: GateMode,

    /// Replicas, on different nodes, behind a PodDisruptionBudget of minAvailable 1.
    #[arg(long, value_name = "N", default_value_t = crate::gate::manifests::MIN_REPLICAS)]
    pub replicas: u16,

    /// The control plane's addresses (a CIDR; repeatable): a NetworkPolicy lets only them
    /// reach the webhook's port. Without it the port is open to every pod (a warning says so).
    #[arg(long = "allow-from", value_name = "CIDR", value_parser = parse_cidr)]
    pub allow_from: Vec<String>,
}

/// `gate serve --mode`: clap's side of `gate::Mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GateMode {
    Enforce,
    Warn,
    Audit,
}

#[derive(Debug, Args, Clone)]
pub struct GateServeArgs {
    /// Where to listen (HTTPS).
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8443")]
    pub listen: std::net::SocketAddr,

    /// Serve /metrics here, over plain HTTP, and not on --listen (so that a NetworkPolicy can
    /// keep the webhook's port to the control plane and let Prometheus scrape this one).
    /// Without it, /metrics is served on --listen.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,

    /// The Secret (in the gate's namespace, -n) that keeps its CA and serving certificate;
    /// created by the first replica to start. Its records (a Lease per cluster,
    /// kubectl-raft-gate.NS.STS) are kept in that namespace too.
    #[arg(long, value_name = "NAME", default_value = "kubectl-raft-gate-tls")]
    pub tls_secret: String,

    /// The gate's Service: its certificate names NAME.NAMESPACE.svc.
    #[arg(long, value_name = "NAME", default_value = "kubectl-raft-gate")]
    pub service: String,

    /// A further name (or IP) the serving certificate carries; repeatable.
    #[arg(long = "tls-name", value_name = "NAME", value_parser = parse_tls_name)]
    pub tls_names: Vec<String>,

    /// The ValidatingWebhookConfiguration whose webhooks get the gate's CA, and whose
    /// namespaceSelector says which namespaces' evictions are the gate's to decide (a review
    /// for any other namespace is allowed and does nothing); "" for none (then every review
    /// is decided).
    #[arg(long, value_name = "NAME", default_value = "kubectl-raft-gate")]
    pub webhook: String,

    /// Where kubectl raft drain and restart keep their Leases (read only): an eviction of a
    /// cluster whose lock someone holds is refused, unless that holder sent it.
    #[arg(long, value_name = "NAMESPACE", default_value = DEFAULT_LOCK_NAMESPACE)]
    pub lock_namespace: String,

    /// A member more entries behind the leader than this is not counted healthy.
    #[arg(long, value_name = "ENTRIES", default_value_t = crate::assess::voter::DEFAULT_MAX_LAG)]
    pub max_lag: u64,

    /// enforce: refuse (429) what drain would not do, and start leaders' transfers. warn: a
    /// trial that refuses, starts and records nothing; every eviction is allowed, and one that
    /// enforce would refuse carries that refusal as a warning (kubectl prints it) and an Event.
    /// audit: as warn, without the warning (Events and the metric
    /// kubectl_raft_gate_decisions_total{verdict="would-refuse"} only).
    #[arg(long, value_enum, default_value_t = GateMode::Enforce)]
    pub mode: GateMode,

    /// A taint key that says a node is being drained, besides a cordon and the known drainers'
    /// (cluster-autoscaler's, Karpenter's, EKS managed node groups'); repeatable. An eviction of
    /// a Raft member from a node that is neither is refused (NotDraining), unless kubectl raft
    /// drain or restart sent it.
    #[arg(long = "drain-taint", value_name = "KEY")]
    pub drain_taints: Vec<String>,

    /// The longest a review may take from its arrival (its TLS handshake and body included);
    /// past it the eviction is refused (429) and retried. Keep it 2s under the webhook's
    /// timeoutSeconds (a shorter timeout the API server sends with a review is honoured).
    #[arg(long, value_name = "DURATION", default_value = "8s", value_parser = parse_duration)]
    pub decide_within: Duration,

    /// How long a serving certificate the gate issues lives.
    #[arg(long, value_name = "DURATION", default_value = "365days", value_parser = parse_lifetime, help_heading = "Certificates")]
    pub cert_validity: Duration,

    /// How long before its end a serving certificate is issued again (from the same CA).
    #[arg(long, value_name = "DURATION", default_value = "30days", value_parser = parse_lifetime, help_heading = "Certificates")]
    pub cert_renew_before: Duration,

    /// How often the certificate, and the CA in the webhook configuration, are checked.
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = parse_duration, help_heading = "Certificates")]
    pub cert_check_every: Duration,

    /// Take reviews only from callers with a client certificate this CA (PEM) signed: the API
    /// server, given one through its AdmissionConfiguration's kubeConfigFile (docs/gate.md,
    /// "Only the API server"). Without it, whoever reaches the gate's port may post reviews.
    /// /healthz, /readyz and /metrics need no certificate.
    #[arg(long, value_name = "FILE", help_heading = "Callers")]
    pub client_ca: Option<PathBuf>,

    /// A name the caller's certificate must carry (its common name, or a DNS name); repeatable.
    /// Without it, any certificate --client-ca signed is taken: give it whenever that CA also
    /// signs users' certificates (a cluster's own CA does).
    #[arg(
        long = "client-name",
        value_name = "NAME",
        requires = "client_ca",
        help_heading = "Callers"
    )]
    pub client_names: Vec<String>,

    /// The longest a leadership transfer the gate started is waited for.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub transfer_timeout: Duration,

    /// On SIGTERM, how long the gate keeps answering after it reports itself not ready (so
    /// that the API server and the Service stop sending here first), before it stops taking
    /// connections and lets the requests in flight end. Keep it, plus --decide-within, under
    /// the pod's terminationGracePeriodSeconds.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub shutdown_delay: Duration,

    /// Extra profiles (YAML), as for the other verbs.
    #[arg(long, value_name = "FILE")]
    pub profiles: Option<PathBuf>,

    // How replicas are reached (in the cluster: `--via direct`, the pod IPs).
    #[command(flatten)]
    pub reach: ReachArgs,
    // No credential flags: the gate answers any evictor, so a token of its own (a file, its
    // environment, a Secret named on its command line) would go to whatever pod an evictor
    // names. A cluster's credentials come only from the Secret its StatefulSet names and its
    // writer labelled kubectl-raft.io/credentials=true.
}

#[derive(Debug, Args, Clone)]
pub struct YieldArgs {
    /// The cluster: a StatefulSet (NAME or sts/NAME) or any of its pods.
    #[arg(value_name = "NAME", conflicts_with_all = ["selector", "all_namespaces"], required_unless_present_any = ["selector", "local"])]
    pub name: Option<String>,

    /// The member to hand leadership to (a pod of the cluster); default: the healthy voter
    /// with the least lag, preferring a schedulable, Ready node.
    #[arg(long, value_name = "POD", help_heading = "What to act on")]
    pub to: Option<String>,

    /// A target may be at most this many log entries behind the leader.
    #[arg(long, value_name = "ENTRIES", default_value_t = crate::assess::voter::DEFAULT_MAX_LAG)]
    pub max_lag: u64,

    /// Go ahead despite a refusal that can be overridden (several claimants, fault tolerance
    /// 0, a target that is unhealthy, lagging or unreachable).
    #[arg(long)]
    pub force: bool,

    /// How long to wait for the handover to complete, e.g. 30s.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub timeout: Duration,

    /// Print the leader, the chosen target and why, and the exact request; change nothing.
    /// As kubectl's: --dry-run, --dry-run=client or =server (the same here), =none.
    #[arg(long, value_name = "STRATEGY", num_args = 0..=1, require_equals = true, default_missing_value = "client", default_value = "none", hide_default_value = true, value_parser = parse_dry_run)]
    pub dry_run: bool,

    /// For systems that cannot transfer (ZooKeeper): delete the leader pod (honouring its
    /// grace period) and wait for a new leader, reporting the leaderless window.
    #[arg(long)]
    pub allow_election: bool,

    /// The namespace of the locks drain and restart keep (one Lease per cluster): yield takes
    /// the cluster's while it acts, so that it never moves leadership under a drain or a
    /// restart, nor they under it. Not used with --local (the hook runs inside a drain).
    #[arg(long, value_name = "NAMESPACE", default_value = DEFAULT_LOCK_NAMESPACE)]
    pub lock_namespace: String,

    /// Also move the leaders of the old leader's other Raft groups off it (NATS: its streams
    /// and consumers, each asked in its own account: NATS_<ACCOUNT>_USER/_PASSWORD or
    /// NATS_<ACCOUNT>_CREDS), and wait until it leads none of them.
    #[arg(long, conflicts_with_all = ["local", "allow_election"])]
    pub streams: bool,

    /// In-pod handover for a preStop hook: talk to this replica on localhost (and its peers
    /// from its member list); no Kubernetes API. Exits 0 at once when it does not lead.
    #[arg(long, conflicts_with_all = ["name", "selector", "allow_election"], requires = "system", help_heading = "In-pod handover (preStop hook)")]
    pub local: bool,

    /// With --local: the replica's port (default: the profile's first port number).
    #[arg(
        long,
        value_name = "PORT",
        requires = "local",
        help_heading = "In-pod handover (preStop hook)"
    )]
    pub port: Option<u16>,

    /// With --local: the pod's terminationGracePeriodSeconds, which the preStop hook and the
    /// process's own shutdown share. The hook gives up after two thirds of it (or --timeout,
    /// whichever is shorter) so the process keeps a third to stop.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 30,
        requires = "local",
        help_heading = "In-pod handover (preStop hook)"
    )]
    pub pod_grace_period: u32,

    /// With --local: before handing over (or, on a follower, before letting it stop), wait
    /// until the other members form a quorum of healthy, caught-up voters without this one,
    /// for at most half of the hook's time; then go ahead either way (the pod is stopping),
    /// saying which. For a plain `kubectl rollout restart`, a scale-down or an autoscaler's
    /// eviction: the next member stops only once the last one's replacement has caught up.
    #[arg(
        long,
        requires = "local",
        help_heading = "In-pod handover (preStop hook)"
    )]
    pub wait_for_quorum: bool,

    #[command(flatten)]
    pub select: SelectArgs,

    #[command(flatten)]
    pub probe: ProbeArgs,

    /// Output format: a summary line (table), or the documented report (docs/yield.md).
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table, help_heading = "Output")]
    pub output: Output,
}

#[derive(Debug, Args, Clone)]
pub struct DrainArgs {
    /// The nodes to drain.
    #[arg(
        value_name = "NODE",
        required_unless_present = "selector",
        conflicts_with = "selector"
    )]
    pub nodes: Vec<String>,

    /// Drain the nodes with these labels instead of naming them (a label selector).
    #[arg(
        short = 'l',
        long,
        value_name = "SELECTOR",
        help_heading = "What to act on"
    )]
    pub selector: Option<String>,

    /// Only pods with these labels are moved (a label selector); others stay.
    #[arg(long, value_name = "SELECTOR", help_heading = "What to act on")]
    pub pod_selector: Option<String>,

    /// Leave DaemonSet-managed pods where they are (without it, their presence stops the drain).
    #[arg(long, help_heading = PODS_AS_KUBECTL)]
    pub ignore_daemonsets: bool,

    /// Delete pods that no controller manages (nothing recreates them).
    #[arg(long, help_heading = PODS_AS_KUBECTL)]
    pub force: bool,

    /// Seconds each ordinary pod is given to stop (default: the pod's own
    /// terminationGracePeriodSeconds). Raft members always get their own: their preStop hook
    /// and shutdown are part of a safe handover.
    #[arg(long, value_name = "SECONDS")]
    pub grace_period: Option<u32>,

    /// Print the plan: ordered steps and why, quorum and fault tolerance during each, what each
    /// PDB answers (a server-side dry-run eviction) and every blocker; change nothing. As
    /// kubectl's: --dry-run, --dry-run=client or =server (the same here: every eviction is
    /// asked of the API server as a server-side dry run), =none.
    #[arg(long, value_name = "STRATEGY", num_args = 0..=1, require_equals = true, default_missing_value = "client", default_value = "none", hide_default_value = true, value_parser = parse_dry_run)]
    pub dry_run: bool,

    /// Evict a member whose replacement cannot start elsewhere (a volume pinned to the node, no
    /// node its anti-affinity allows); its cluster runs a member short until the node is back.
    #[arg(long)]
    pub allow_degraded: bool,

    /// How many Raft clusters proceed at once (a cluster's own members always go one by one).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub parallel_clusters: u16,

    /// Extra profiles: a YAML file in the format of the built-in ones (docs/profiles.md).
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath, help_heading = "What to act on")]
    pub profiles: Option<PathBuf>,

    #[command(flatten)]
    pub steps: StepArgs,

    #[command(flatten)]
    pub probe: ProbeArgs,

    /// Output format: progress and a summary (table), or the documented report (docs/drain.md).
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table, help_heading = "Output")]
    pub output: Output,
}

#[derive(Debug, Args, Clone)]
pub struct RestartArgs {
    /// The StatefulSet (NAME or sts/NAME).
    #[arg(
        value_name = "NAME",
        conflicts_with = "selector",
        required_unless_present = "selector"
    )]
    pub name: Option<String>,

    /// The StatefulSets whose labels match (as `kubectl rollout restart sts -l`), restarted one
    /// after another in namespace and name order; those that are not Raft clusters are skipped.
    #[arg(
        short = 'l',
        long,
        value_name = "SELECTOR",
        help_heading = "What to act on"
    )]
    pub selector: Option<String>,

    /// With -l: the matching StatefulSets of every namespace.
    #[arg(
        short = 'A',
        long,
        requires = "selector",
        help_heading = "What to act on"
    )]
    pub all_namespaces: bool,

    /// Print the order, the transfer and what each step leaves; change nothing. As kubectl's:
    /// --dry-run, --dry-run=client or =server (the same here), =none.
    #[arg(long, value_name = "STRATEGY", num_args = 0..=1, require_equals = true, default_missing_value = "client", default_value = "none", hide_default_value = true, value_parser = parse_dry_run)]
    pub dry_run: bool,

    #[command(flatten)]
    pub steps: StepArgs,

    /// Treat the cluster as this system instead of recognising it (see `kubectl raft systems`).
    #[arg(long, value_name = "SYSTEM", help_heading = "What to act on")]
    pub system: Option<String>,

    /// Extra profiles: a YAML file in the format of the built-in ones (docs/profiles.md).
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath, help_heading = "What to act on")]
    pub profiles: Option<PathBuf>,

    #[command(flatten)]
    pub probe: ProbeArgs,

    /// Output format: progress and a summary (table), or the documented report (docs/restart.md).
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table, help_heading = "Output")]
    pub output: Output,
}

/// Where drain's and restart's locks live unless --lock-namespace says otherwise.
pub const DEFAULT_LOCK_NAMESPACE: &str = crate::live::lock::DEFAULT_NAMESPACE;

/// How each step of `drain` and `restart` is taken: one definition for both verbs.
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Each step")]
pub struct StepArgs {
    /// How long to wait for any one thing (a pod to go, a PDB to allow, a replacement to
    /// rejoin, a blocked cluster to recover) before stopping, e.g. 5m.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    pub timeout: Duration,

    /// A member more log entries than this behind the leader is not counted healthy, and a
    /// replacement is not rejoined until it is within it.
    #[arg(long, value_name = "ENTRIES", default_value_t = crate::assess::voter::DEFAULT_MAX_LAG)]
    pub max_lag: u64,

    /// Act on clusters whose voters could only be counted from their pods (the system's own
    /// configuration could not be read: ClickHouse Keeper, spurctld, a member list that did
    /// not answer): every cluster of the run, or only those named (NAMESPACE/NAME, comma
    /// separated). Check the membership first: a server that is configured but not running
    /// makes that count, and so the quorum check, wrong.
    #[arg(long, value_name = "NS/NAME", num_args = 0.., value_delimiter = ',', require_equals = true)]
    pub assume_voters_are_pods: Option<Vec<String>>,

    /// Act on clusters whose system says nothing that tells a follower still hears from its
    /// leader (spurctld; a profile without such a fact: `kubectl raft systems`): every
    /// cluster of the run, or only those named (NAMESPACE/NAME, comma separated). Check the
    /// followers first: one cut off from its leader can say "follower" for a while.
    #[arg(long, value_name = "NS/NAME", num_args = 0.., value_delimiter = ',', require_equals = true)]
    pub assume_followers_current: Option<Vec<String>>,

    /// Evict pods (members included) that use emptyDir volumes; their local data is lost: a
    /// member comes back empty and must catch up as a new member.
    #[arg(long)]
    pub delete_emptydir_data: bool,

    /// Evict members whose data is in a hostPath volume: it stays on the drained node, and
    /// each replacement on another node starts without it and must catch up as a new member.
    #[arg(long)]
    pub allow_hostpath_data: bool,

    /// Delete pods instead of evicting them: PodDisruptionBudgets are not consulted
    /// (Raft clusters are still protected by their own checks).
    #[arg(long)]
    pub disable_eviction: bool,

    /// The namespace of the locks (one Lease per cluster) that keep two drains or restarts of
    /// the same cluster apart. Everyone maintaining a cluster must use the same one; it must
    /// exist (docs/rbac.yaml creates the default and grants writing Leases only there).
    #[arg(long, value_name = "NAMESPACE", default_value = DEFAULT_LOCK_NAMESPACE)]
    pub lock_namespace: String,
}

#[derive(Debug, Args, Clone)]
pub struct CompletionArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args, Clone)]
pub struct VersionArgs {
    /// Output format: a line per fact (table), or json/yaml.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table, help_heading = "Output")]
    pub output: Output,
}

#[derive(Debug, Args, Clone)]
pub struct CopyArgs {
    /// Where to put the copy: a file path, or an existing directory (then DIR/kubectl-raft).
    #[arg(value_name = "PATH", value_hint = clap::ValueHint::AnyPath)]
    pub path: PathBuf,
}

#[derive(Debug, Args, Clone)]
pub struct SystemsArgs {
    /// Extra profiles: a YAML file in the format of the built-in ones (docs/profiles.md).
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub profiles: Option<PathBuf>,

    /// Output format: table, or yaml for the full profiles (a starting point for your own).
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table, help_heading = "Output")]
    pub output: Output,
}

#[derive(Debug, Args, Clone)]
pub struct StatusArgs {
    /// A StatefulSet name (NAME or sts/NAME); all recognised Raft clusters when omitted.
    #[arg(value_name = "NAME", conflicts_with_all = ["selector", "all_namespaces"])]
    pub name: Option<String>,

    /// Keep watching: on a terminal the table is redrawn every --interval with what changed
    /// and a running line per cluster (leader changes, terms advanced, time without a leader);
    /// otherwise one line per change (with -o json, one JSON event per change). Ctrl-C ends it
    /// with a summary.
    #[arg(short = 'w', long, help_heading = "Watching")]
    pub watch: bool,

    /// With --watch: how often the replicas are asked (at least 500ms; a round never starts
    /// before the last has ended).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration, requires = "watch", help_heading = "Watching")]
    pub interval: Duration,

    #[command(flatten)]
    pub select: SelectArgs,

    #[command(flatten)]
    pub probe: ProbeArgs,

    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table, help_heading = "Output")]
    pub output: Output,
}

/// Which replicas form the clusters to act on. Every verb that takes a NAME flattens this,
/// and its NAME conflicts with `-l` and `-A` (a name needs one namespace).
#[derive(Debug, Args, Clone, Default)]
#[command(next_help_heading = "What to act on")]
pub struct SelectArgs {
    /// Look in every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,

    /// Only clusters with a replica on this node.
    #[arg(long, value_name = "NODE")]
    pub node: Option<String>,

    /// A label selector for the pods of one Raft cluster, for replicas not owned by a StatefulSet.
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<String>,

    /// Treat the cluster as this system instead of recognising it (see `kubectl raft systems`).
    #[arg(long, value_name = "SYSTEM")]
    pub system: Option<String>,

    /// Extra profiles: a YAML file in the format of the built-in ones (docs/profiles.md).
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub profiles: Option<PathBuf>,
}

/// How replicas are reached: the flags every verb that asks replicas shares, `gate serve`'s
/// among them (which has no credential flags: `ProbeArgs` adds them for the others).
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "How replicas are reached")]
pub struct ReachArgs {
    /// How to reach each replica: the API server's pods/proxy (HTTP, and HTTPS it does not
    /// verify), the pod IP directly, or a port-forward through the API server. Requests that
    /// are not HTTP (a NATS stepdown, a four-letter word), and HTTPS to a cluster with TLS
    /// material (a CA to verify, a client certificate), use a port-forward when this is
    /// `proxy`: TLS is then end to end.
    #[arg(long, value_enum, default_value_t = Via::Proxy)]
    pub via: Via,

    /// Time limit for one request to one replica.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub probe_timeout: Duration,

    /// Requests to replicas in flight at once, across all clusters (the API server limits
    /// the requests it serves at once, for every client).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_INFLIGHT, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_inflight: u16,
}

/// How replicas are reached, and the credentials sent to them.
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "How replicas are reached")]
pub struct ProbeArgs {
    #[command(flatten)]
    pub reach: ReachArgs,

    /// A Secret in each cluster's namespace whose keys are the variables the system's
    /// credentials are read from (NATS_USER, NATS_PASSWORD, NATS_CREDS, CONSUL_HTTP_TOKEN,
    /// NOMAD_TOKEN, VAULT_TOKEN). Without it, the Secret the annotation
    /// kubectl-raft.io/credentials-secret names, if that Secret is labelled
    /// kubectl-raft.io/credentials=true. Values are never printed.
    #[arg(
        long,
        value_name = "NAME",
        conflicts_with = "credentials_file",
        help_heading = "Credentials"
    )]
    pub credentials_secret: Option<String>,

    /// The same variables from a file of KEY=VALUE lines (the format of `kubectl create
    /// secret --from-env-file`); in a pod, a mounted Secret. Your own, like the environment:
    /// sent only to clusters you name, or to all with --credentials-from-env.
    #[arg(long, value_name = "PATH", help_heading = "Credentials")]
    pub credentials_file: Option<std::path::PathBuf>,

    /// Send your own credentials (the environment's CONSUL_HTTP_TOKEN, NATS_USER, ..., and
    /// --credentials-file) to every cluster surveyed, not only to those you name: by default
    /// a cluster you did not name (`status -A`, `drain`, `restart -l`) gets only what a
    /// Secret in its own namespace holds, so a tenant's StatefulSet that claims to be Consul
    /// cannot collect your token (docs/security.md).
    #[arg(long, help_heading = "Credentials")]
    pub credentials_from_env: bool,

    #[command(flatten)]
    pub tls: TlsArgs,
}

/// TLS to the replicas (HTTPS ports: `kubectl-raft.io/scheme: https` or the profile's).
#[derive(Debug, Args, Clone, Default)]
#[command(next_help_heading = "TLS to the replicas")]
pub struct TlsArgs {
    /// A Secret in each cluster's namespace with ca.crt (the CA that signed the replicas'
    /// certificates), and tls.crt and tls.key where they require a client certificate (a
    /// kubernetes.io/tls Secret, cert-manager's shape). Without it, the Secret the annotation
    /// kubectl-raft.io/tls-secret names, if that Secret is labelled
    /// kubectl-raft.io/credentials=true.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["tls_ca", "tls_cert", "tls_key"])]
    pub tls_secret: Option<String>,

    /// The CA (PEM) the replicas' certificates are verified with. Your own, like
    /// --credentials-file: used only for clusters you name (over their annotation's
    /// Secret), or for all with --credentials-from-env. In a pod (`yield --local`), a
    /// mounted file, and the replica is then spoken to over HTTPS.
    #[arg(long, value_name = "PATH")]
    pub tls_ca: Option<std::path::PathBuf>,

    /// A client certificate (PEM) to present, with --tls-key: etcd's --client-cert-auth,
    /// Consul's verify_incoming. Presented only to a replica verified by the CA.
    #[arg(long, value_name = "PATH", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,

    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "PATH", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,

    /// The name the replicas' certificates must carry, instead of their own DNS names
    /// (pod.service.namespace[.svc[.cluster.local]]).
    #[arg(long, value_name = "NAME")]
    pub tls_server_name: Option<String>,

    /// Do not verify the replicas' certificates (anyone on the path can then answer for a
    /// replica), and so present no client certificate: `status` marks every cluster read
    /// this way.
    #[arg(long)]
    pub tls_skip_verify: bool,
}

impl TlsArgs {
    /// The library's TLS settings.
    pub fn settings(&self) -> crate::credentials::TlsSettings {
        crate::credentials::TlsSettings {
            secret: self.tls_secret.clone(),
            ca: self.tls_ca.clone(),
            cert: self.tls_cert.clone(),
            key: self.tls_key.clone(),
            choices: crate::tls::TlsChoices {
                server_name: self.tls_server_name.clone(),
                skip_verify: self.tls_skip_verify,
            },
        }
    }
}

pub const DEFAULT_MAX_INFLIGHT: u16 = crate::survey::DEFAULT_MAX_INFLIGHT;

/// The heading of drain's flags for pods that are not Raft members (kubectl drain's flags).
const PODS_AS_KUBECTL: &str = "Other pods (as kubectl drain)";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Via {
    /// The API server's pods/proxy subresource: works wherever kubectl works (needs `get pods/proxy`).
    Proxy,
    /// Straight to the pod IP: for running inside the cluster network.
    Direct,
    /// The API server's pods/portforward: a TCP stream per request, so protocols other than
    /// HTTP work from anywhere kubectl works (needs `get` and `create` on pods/portforward).
    PortForward,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Wide,
    Json,
    Yaml,
}

// Where the flags meet the library: every library module takes settings of its own, built
// from clap's structs here and nowhere else.

impl GlobalArgs {
    /// The API server the flags name.
    pub fn connect_options(&self) -> crate::connect::ConnectOptions {
        crate::connect::ConnectOptions {
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
            namespace: self.namespace.clone(),
            request_timeout: self.request_timeout,
            impersonate: crate::connect::Impersonate {
                user: self.as_user.clone(),
                groups: self.as_group.clone(),
                uid: self.as_uid.clone(),
            },
        }
    }
}

/// The survey the flags describe.
pub fn survey_settings(
    g: &GlobalArgs,
    select: &SelectArgs,
    probe: &ProbeArgs,
) -> crate::survey::SurveySettings {
    crate::survey::SurveySettings {
        credentials: crate::survey::CredentialSettings {
            secret: probe.credentials_secret.clone(),
            file: probe.credentials_file.clone(),
            from_env: probe.credentials_from_env,
            tls: probe.tls.settings(),
        },
        ..reached(g, select, &probe.reach)
    }
}

/// The gate's survey: every namespace, its profiles, how it reaches replicas, and no
/// credential of its own (docs/gate.md: it answers any evictor).
pub fn gate_survey_settings(g: &GlobalArgs, a: &GateServeArgs) -> crate::survey::SurveySettings {
    let select = SelectArgs {
        all_namespaces: true,
        profiles: a.profiles.clone(),
        ..Default::default()
    };
    reached(g, &select, &a.reach)
}

/// A survey of `select`'s clusters, their replicas reached as `reach` says, with only the
/// credentials a cluster's own Secret holds: the one place the reach flags become the
/// library's route, limit and bound.
fn reached(
    g: &GlobalArgs,
    select: &SelectArgs,
    reach: &ReachArgs,
) -> crate::survey::SurveySettings {
    crate::survey::SurveySettings {
        connect: g.connect_options(),
        profiles: select.profiles.clone(),
        system: select.system.clone(),
        all_namespaces: select.all_namespaces,
        route: reach.via.into(),
        probe_timeout: reach.probe_timeout,
        max_inflight: usize::from(reach.max_inflight),
        credentials: crate::survey::CredentialSettings::default(),
    }
}

impl From<Via> for crate::transport::Route {
    fn from(v: Via) -> Self {
        match v {
            Via::Proxy => Self::Proxy,
            Via::Direct => Self::Direct,
            Via::PortForward => Self::PortForward,
        }
    }
}

/// The gate's settings from its flags.
/// `gate manifests`' flags as the manifests' settings; `-n` names the gate's namespace.
pub fn gate_manifest_settings(
    g: &GlobalArgs,
    a: &GateManifestsArgs,
) -> crate::gate::manifests::ManifestSettings {
    let mut s = crate::gate::manifests::ManifestSettings::for_image(&a.image);
    if let Some(ns) = &g.namespace {
        s.namespace = ns.clone();
    }
    s.mode = gate_mode(a.mode);
    s.replicas = a.replicas;
    s.allow_from = a.allow_from.clone();
    s
}

fn gate_mode(m: GateMode) -> crate::gate::Mode {
    match m {
        GateMode::Enforce => crate::gate::Mode::Enforce,
        GateMode::Warn => crate::gate::Mode::Warn,
        GateMode::Audit => crate::gate::Mode::Audit,
    }
}

pub fn gate_settings(a: &GateServeArgs) -> crate::gate::Settings {
    let mut s = crate::gate::Settings::default();
    s.opts.max_lag = a.max_lag;
    s.mode = gate_mode(a.mode);
    s.decide_within = a.decide_within;
    s.transfer_timeout = a.transfer_timeout;
    s.drain_taints = a.drain_taints.clone();
    s
}

/// The step flags drain and restart share, as the planner's options: drain's `nodes` and
/// `--allow-degraded`; a restart has neither.
pub fn step_options(
    steps: &StepArgs,
    nodes: std::collections::BTreeSet<String>,
    allow_degraded: bool,
) -> crate::plan::drain::DrainOptions {
    use crate::plan::drain::{Assume, DrainOptions};
    DrainOptions {
        nodes,
        max_lag: steps.max_lag,
        allow_degraded,
        delete_emptydir_data: steps.delete_emptydir_data,
        allow_hostpath_data: steps.allow_hostpath_data,
        assume_voters_are_pods: Assume::from_flag(steps.assume_voters_are_pods.as_deref()),
        assume_followers_current: Assume::from_flag(steps.assume_followers_current.as_deref()),
    }
}

/// `kubectl raft restart`'s flags as the library's
/// [`crate::live::restart::RestartSettings`]: the one place they meet.
pub fn restart_settings(args: &RestartArgs) -> crate::live::restart::RestartSettings {
    crate::live::restart::RestartSettings {
        dry_run: args.dry_run,
        named: args.name.is_some(),
        opts: step_options(&args.steps, std::collections::BTreeSet::new(), false),
        settings: crate::drain::Settings {
            timeout: args.steps.timeout,
        },
        lock_namespace: args.steps.lock_namespace.clone(),
        disable_eviction: args.steps.disable_eviction,
        observed_within: crate::live::restart::OBSERVED_WITHIN,
    }
}

/// `kubectl raft yield`'s flags as the library's [`crate::live::yield_::YieldSettings`]: the
/// one place they meet.
pub fn yield_settings(g: &GlobalArgs, a: &YieldArgs) -> crate::live::yield_::YieldSettings {
    crate::live::yield_::YieldSettings {
        name: a.name.clone(),
        nodes: a.select.node.iter().cloned().collect(),
        selector: a.select.selector.clone(),
        to: a.to.clone(),
        max_lag: a.max_lag,
        force: a.force,
        allow_election: a.allow_election,
        streams: a.streams,
        dry_run: a.dry_run,
        timeout: a.timeout,
        lock_namespace: a.lock_namespace.clone(),
        survey: survey_settings(g, &a.select, &a.probe),
        local: a.local.then_some(crate::live::yield_::LocalSettings {
            port: a.port,
            pod_grace_period: a.pod_grace_period,
            wait_for_quorum: a.wait_for_quorum,
        }),
    }
}

impl From<Output> for crate::render::Format {
    fn from(o: Output) -> Self {
        match o {
            Output::Table => Self::Table,
            Output::Wide => Self::Wide,
            Output::Json => Self::Json,
            Output::Yaml => Self::Yaml,
        }
    }
}

/// The longest duration any flag takes: a maintenance step that waits longer than a week is a
/// mistake in the command line, and larger values overflow the clock's arithmetic.
pub const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// Parses durations as kubectl does (Go's `time.ParseDuration`: `500ms`, `2s`, `1m30s`, `1h`,
/// `1.5s`) or plain seconds (`3`), through humantime for the unit sequences; anything above
/// [`MAX_DURATION`] is refused with a message, never a panic.
/// A certificate's lifetime: humantime's forms ("365days", "12h", "90s"), at least a second.
pub fn parse_lifetime(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("invalid duration {s:?}: {e} (e.g. 365days, 12h, 90s)"))?;
    if d < Duration::from_secs(1) {
        return Err(format!("{s:?} is shorter than a second"));
    }
    Ok(d)
}

/// kubectl's --dry-run strategies: client and server plan and change nothing (this plugin's
/// plan is made locally and its evictions are asked as server-side dry runs either way);
/// none acts.
pub fn parse_dry_run(s: &str) -> Result<bool, String> {
    match s {
        "client" | "server" => Ok(true),
        "none" => Ok(false),
        _ => Err(format!(
            "--dry-run takes client, server or none, as kubectl's does (got {s:?})"
        )),
    }
}

/// `--tls-name`: a name the serving certificate carries and a TLS client can check it by (a
/// DNS name or an IP address; no wildcard, no trailing dot, no brackets).
pub fn parse_tls_name(s: &str) -> Result<String, String> {
    let checkable = !s.ends_with('.')
        && !s.contains('*')
        && rustls::pki_types::ServerName::try_from(s.to_string()).is_ok();
    if checkable {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not a name a client can check the certificate by (a DNS name such as gate.example.com, or an IP address such as 10.0.0.5; no wildcard, trailing dot or brackets)"
        ))
    }
}

/// `--allow-from`: an address block, as a NetworkPolicy's ipBlock takes it (`10.0.0.0/24`,
/// `fd00::/64`; a single address is taken as its /32 or /128).
pub fn parse_cidr(s: &str) -> Result<String, String> {
    let (addr, prefix) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let ip: std::net::IpAddr = addr
        .parse()
        .map_err(|_| format!("{s:?} is not a CIDR (e.g. 10.0.0.0/24 or fd00::/64)"))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix {
        None => max,
        Some(p) => p
            .parse::<u8>()
            .ok()
            .filter(|n| *n <= max)
            .ok_or_else(|| format!("{s:?}: the prefix length must be 0 to {max}"))?,
    };
    Ok(format!("{ip}/{prefix}"))
}

pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let bad = || format!("invalid duration {s:?}: expected e.g. 500ms, 2s, 1m30s, 1h");
    if s.is_empty() || s.starts_with('-') {
        return Err(bad());
    }
    let d = if s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|_| too_long(s))?
    } else if let Some(d) = decimal_duration(s) {
        d.ok_or_else(|| too_long(s))?
    } else {
        match humantime::parse_duration(s) {
            Ok(d) => d,
            Err(humantime::DurationError::NumberOverflow) => return Err(too_long(s)),
            Err(_) => return Err(bad()),
        }
    };
    if d > MAX_DURATION {
        return Err(too_long(s));
    }
    Ok(d)
}

fn too_long(s: &str) -> String {
    format!("duration {s:?} is out of range: the longest accepted is 168h (a week)")
}

/// `1.5s`, `0.25h`: one decimal number and one unit (Go accepts them; humantime does not).
/// None when `s` is not of that shape; Some(None) when it is, but out of range.
fn decimal_duration(s: &str) -> Option<Option<Duration>> {
    let i = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (num, unit) = s.split_at(i);
    if !num.contains('.') {
        return None;
    }
    let n: f64 = num.parse().ok()?;
    let scale = match unit {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return None,
    };
    Some(Duration::try_from_secs_f64(n * scale).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// The container's args in what `gate manifests` prints are `gate serve`'s flags, as this
    /// parser reads them: the namespace, the route, the metrics port and the mode.
    #[test]
    fn the_manifests_container_args_parse_as_gate_serve() {
        let mut m = crate::gate::manifests::ManifestSettings::for_image("r/k:v1");
        m.namespace = "gates".into();
        m.mode = crate::gate::Mode::Warn;
        let yaml = m.render().unwrap();
        let deployment = yaml
            .split("\n---\n")
            .find(|d| d.contains("\nkind: Deployment\n"))
            .unwrap();
        let doc: serde_json::Value = serde_saphyr::from_str(deployment).unwrap();
        let args: Vec<String> = doc["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect();
        let cli =
            Cli::try_parse_from(std::iter::once("kubectl-raft".to_string()).chain(args)).unwrap();
        let Command::Gate(GateArgs {
            command: GateCommand::Serve(a),
        }) = cli.command
        else {
            panic!("gate serve")
        };
        assert_eq!(cli.global.namespace.as_deref(), Some("gates"));
        assert_eq!(a.mode, GateMode::Warn);
        assert_eq!(a.metrics_listen, Some("0.0.0.0:9090".parse().unwrap()));
        assert_eq!(a.reach.via, Via::Direct);
    }

    #[test]
    fn allow_from_takes_cidrs_of_both_families_and_single_addresses() {
        assert_eq!(parse_cidr("10.0.0.0/24").unwrap(), "10.0.0.0/24");
        assert_eq!(parse_cidr("fd00::/64").unwrap(), "fd00::/64");
        assert_eq!(parse_cidr("172.16.0.5").unwrap(), "172.16.0.5/32");
    }

    #[test]
    fn tls_names_a_client_cannot_check_are_refused() {
        for good in [
            "gate.example.com",
            "127.0.0.1",
            "::1",
            "kubectl-raft-gate.ns.svc",
        ] {
            assert!(parse_tls_name(good).is_ok(), "{good}");
        }
        for bad in ["*.example.com", "gate.example.com.", "[::1]", "", "a b"] {
            assert!(parse_tls_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn allow_from_refuses_what_is_not_a_cidr() {
        for bad in [
            "",
            "10.0.0/24",
            "10.0.0.0/33",
            "fd00::/129",
            "10.0.0.0/",
            "x/8",
        ] {
            assert!(parse_cidr(bad).is_err(), "{bad:?}");
        }
    }

    fn drain_dry_run(args: &[&str]) -> (bool, Vec<String>) {
        let cli = Cli::try_parse_from(["kubectl-raft", "drain"].iter().chain(args)).unwrap();
        match cli.command {
            Command::Drain(d) => (d.dry_run, d.nodes),
            _ => unreachable!(),
        }
    }

    #[test]
    fn dry_run_takes_kubectls_strategies() {
        assert!(!drain_dry_run(&["n1"]).0);
        assert!(drain_dry_run(&["n1", "--dry-run"]).0);
        assert!(drain_dry_run(&["n1", "--dry-run=client"]).0);
        assert!(drain_dry_run(&["n1", "--dry-run=server"]).0);
        assert!(!drain_dry_run(&["n1", "--dry-run=none"]).0);
        assert!(Cli::try_parse_from(["kubectl-raft", "drain", "n1", "--dry-run=all"]).is_err());
    }

    #[test]
    fn a_bare_dry_run_takes_no_node_as_its_value() {
        assert_eq!(
            drain_dry_run(&["--dry-run", "worker-3"]),
            (true, vec!["worker-3".to_string()])
        );
    }

    #[test]
    fn durations_parse_like_kubectl() {
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("2 parsecs").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn durations_take_kubectl_sequences_and_decimals() {
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1h2m3s").unwrap(), Duration::from_secs(3723));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn huge_durations_are_a_message_not_a_panic() {
        for s in [
            "100000000000000000000",
            "100000000000000000000s",
            "1e300s",
            "99999999999999999999.5h",
            "169h",
            "18446744073709551615ms",
        ] {
            let e = parse_duration(s).expect_err(s);
            assert!(
                e.contains("out of range") || e.contains("invalid"),
                "{s}: {e}"
            );
        }
        assert_eq!(parse_duration("168h").unwrap(), MAX_DURATION);
    }

    /// An embedder's `SurveySettings::default()` is what `kubectl raft status` with no flags
    /// does: the library's defaults and clap's cannot drift apart.
    #[test]
    fn the_librarys_default_settings_are_the_flags_defaults() {
        let cli = Cli::try_parse_from(["kubectl-raft", "status"]).unwrap();
        let Command::Status(s) = cli.command else {
            panic!("status")
        };
        let from_flags = survey_settings(&cli.global, &s.select, &s.probe);
        let lib = crate::survey::SurveySettings::default();
        assert_eq!(from_flags.probe_timeout, lib.probe_timeout);
        assert_eq!(from_flags.max_inflight, lib.max_inflight);
        assert_eq!(from_flags.route, lib.route);
        assert_eq!(
            from_flags.connect.request_timeout,
            lib.connect.request_timeout
        );
    }

    fn gate_serve(args: &[&str]) -> (GlobalArgs, GateServeArgs) {
        let cli =
            Cli::try_parse_from(["kubectl-raft", "gate", "serve"].iter().chain(args)).unwrap();
        let Command::Gate(GateArgs {
            command: GateCommand::Serve(a),
        }) = cli.command
        else {
            panic!("gate serve")
        };
        (cli.global, *a)
    }

    /// `gate serve` reads --via, --probe-timeout and --max-inflight as the verbs do, into the
    /// same settings.
    #[test]
    fn the_gate_reaches_replicas_as_the_verbs_do() {
        let reach = [
            "--via",
            "direct",
            "--probe-timeout",
            "5s",
            "--max-inflight",
            "4",
        ];
        let cli = Cli::try_parse_from(["kubectl-raft", "status"].iter().chain(&reach)).unwrap();
        let Command::Status(s) = &cli.command else {
            panic!("status")
        };
        let verb = survey_settings(&cli.global, &s.select, &s.probe);
        let (g, a) = gate_serve(&reach);
        let gate = gate_survey_settings(&g, &a);
        assert_eq!(gate.route, crate::transport::Route::Direct);
        assert_eq!(
            (gate.route, gate.probe_timeout, gate.max_inflight),
            (verb.route, verb.probe_timeout, verb.max_inflight)
        );
    }

    /// The gate answers any evictor: it takes no credential flag and sends no credential of
    /// its own (docs/gate.md).
    #[test]
    fn the_gate_takes_and_sends_no_credentials_of_its_own() {
        for flag in [
            "--credentials-file=x",
            "--credentials-secret=x",
            "--credentials-from-env",
        ] {
            assert!(
                Cli::try_parse_from(["kubectl-raft", "gate", "serve", flag]).is_err(),
                "{flag}"
            );
        }
        let (g, a) = gate_serve(&[]);
        let c = gate_survey_settings(&g, &a).credentials;
        assert!(
            c.secret.is_none() && c.file.is_none() && !c.from_env,
            "{c:?}"
        );
    }

    #[test]
    fn flags_after_the_subcommand_are_accepted() {
        let cli = Cli::try_parse_from([
            "kubectl-raft",
            "status",
            "sts/etcd",
            "-n",
            "db",
            "-o",
            "json",
            "--context",
            "c",
        ])
        .unwrap();
        assert_eq!(cli.global.namespace.as_deref(), Some("db"));
        assert_eq!(cli.global.context.as_deref(), Some("c"));
        let Command::Status(s) = cli.command else {
            panic!("not status")
        };
        assert_eq!(s.name.as_deref(), Some("sts/etcd"));
        assert_eq!(s.output, Output::Json);
    }
}

/// Every command README.md and docs/ show is one the parser accepts.
#[cfg(test)]
mod documented_commands {
    use super::*;
    use clap::error::ErrorKind;

    /// A documented command: where, the words after the plugin's name, and whether it is a
    /// full command (a line of a code block) or a mention in prose (an inline code span,
    /// which may leave out required arguments but must not use a flag or value that does
    /// not exist).
    #[derive(Debug, PartialEq)]
    pub(crate) struct Shown {
        line: usize,
        words: Vec<String>,
        full: bool,
    }

    /// `kubectl raft ...` / `kubectl-raft ...` in fenced code blocks and inline code spans.
    pub(crate) fn commands(text: &str) -> Vec<Shown> {
        let mut found = vec![];
        let mut fenced = false;
        for (i, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                continue;
            }
            let spans: Vec<&str> = if fenced {
                vec![line.split(" #").next().unwrap_or_default()]
            } else {
                line.split('`').skip(1).step_by(2).collect()
            };
            // A preStop hook's exec array: `command: [/raft/kubectl-raft, yield, --local, ...]`.
            let first_in_array = |at: usize| {
                line[..at]
                    .rfind('[')
                    .is_some_and(|b| !line[b..at].contains(','))
            };
            if let Some(at) = line
                .find("kubectl-raft, ")
                .filter(|&at| fenced && first_in_array(at))
            {
                let rest = &line[at + "kubectl-raft, ".len()..];
                let words = rest[..rest.find(']').unwrap_or(rest.len())]
                    .split(',')
                    .map(|w| w.trim().to_string())
                    .collect();
                found.push(Shown {
                    line: i + 1,
                    words,
                    full: true,
                });
                continue;
            }
            for span in spans {
                for start in ["kubectl raft ", "kubectl-raft "] {
                    let Some(at) = span.find(start) else { continue };
                    // `-n kubectl-raft ...`: the lock namespace, not the binary.
                    let previous = span[..at].split_whitespace().next_back();
                    if matches!(previous, Some("-n" | "--namespace" | "--lock-namespace")) {
                        continue;
                    }
                    let rest = &span[at + start.len()..];
                    let end = [" #", ")", "|", ">", ";", "&&", "\"", ": ", "`"]
                        .iter()
                        .filter_map(|stop| rest.find(stop))
                        .min()
                        .unwrap_or(rest.len());
                    // A word ending in ':' ends a log line's command ("kubectl-raft yield --local: ...").
                    let mut words: Vec<String> = vec![];
                    for w in rest[..end].split_whitespace() {
                        match w.strip_suffix(':') {
                            Some(last) => {
                                words.push(last.to_string());
                                break;
                            }
                            None => words.push(w.to_string()),
                        }
                    }
                    // "`kubectl raft <TAB>`" is no command.
                    if !words.is_empty() && !words.iter().any(|w| w.contains('<')) {
                        found.push(Shown {
                            line: i + 1,
                            words,
                            full: fenced,
                        });
                    }
                }
            }
        }
        found
    }

    /// README.md and every Markdown file under docs/.
    fn markdown_files() -> Vec<std::path::PathBuf> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = vec![root.join("README.md")];
        let mut dirs = vec![root.join("docs")];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "md") {
                    files.push(path);
                }
            }
        }
        files
    }

    #[test]
    fn every_command_in_the_docs_parses() {
        let mut checked = 0;
        let mut failures = vec![];
        for file in markdown_files() {
            let text = std::fs::read_to_string(&file).unwrap();
            for Shown { line, words, full } in commands(&text) {
                checked += 1;
                let argv = std::iter::once("kubectl-raft".to_string()).chain(words.clone());
                match Cli::try_parse_from(argv) {
                    Ok(_) => {}
                    Err(e)
                        if matches!(
                            e.kind(),
                            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
                        ) => {}
                    Err(e) if !full && e.kind() == ErrorKind::MissingRequiredArgument => {}
                    Err(e) => failures.push(format!(
                        "{}:{line}: kubectl raft {}: {}",
                        file.display(),
                        words.join(" "),
                        e.render().to_string().lines().next().unwrap_or_default()
                    )),
                }
            }
        }
        assert!(checked > 30, "only {checked} documented commands found");
        assert!(
            failures.is_empty(),
            "documented commands the parser refuses:\n{}",
            failures.join("\n")
        );
    }

    #[test]
    fn commands_are_found_in_code_blocks_and_spans_but_not_prose() {
        let text = "Run `kubectl raft status -A` now.\n```\n$ kubectl raft yield etcd --to etcd-2   # why\n  command: [/raft/kubectl-raft, yield, --local]\n```\nkubectl raft is great\n";
        let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            commands(text),
            vec![
                Shown {
                    line: 1,
                    words: words(&["status", "-A"]),
                    full: false
                },
                Shown {
                    line: 3,
                    words: words(&["yield", "etcd", "--to", "etcd-2"]),
                    full: true
                },
                Shown {
                    line: 4,
                    words: words(&["yield", "--local"]),
                    full: true
                },
            ]
        );
    }
}
