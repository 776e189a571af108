package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

// podWorker owns one pod on one node from binding to deletion, as the kubelet's pod
// worker does: network, volumes, containers, probes, status, graceful termination.
type podWorker struct {
	a   *agent
	uid types.UID

	mu              sync.Mutex
	pod             *corev1.Pod
	net             *podNetwork
	dir             string
	containers      []*containerRunner
	startTime       *metav1.Time
	waitReason      string // why the pod cannot run yet, shown on its containers
	waitMessage     string
	terminated      bool // every container has been stopped for good
	lastStatus      *corev1.PodStatus
	attached        []string // persistent volume directories this pod holds
	multiAttachSaid bool

	changed    chan struct{} // the pod object changed
	statusKick chan struct{} // the computed status may have changed
	goneCh     chan struct{} // the object left the API (force delete)
	goneOnce   sync.Once
	stopNow    chan struct{} // the agent is shutting down
	stopOnce   sync.Once
	finished   chan struct{}
}

func newPodWorker(a *agent, p *corev1.Pod) *podWorker {
	return &podWorker{a: a, uid: p.UID, pod: p.DeepCopy(),
		changed: make(chan struct{}, 1), statusKick: make(chan struct{}, 1),
		goneCh: make(chan struct{}), stopNow: make(chan struct{}), finished: make(chan struct{})}
}

func (w *podWorker) update(p *corev1.Pod) {
	w.mu.Lock()
	w.pod = p.DeepCopy()
	w.mu.Unlock()
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *podWorker) gone() { w.goneOnce.Do(func() { close(w.goneCh) }) }

// waitUnpaused blocks while the pod's node is paused; false when the agent is shutting down.
func (w *podWorker) waitUnpaused() bool {
	logged := false
	for w.a.paused(w.current().Spec.NodeName) {
		if !logged {
			w.logf("node is paused: waiting for it before acting")
			logged = true
		}
		select {
		case <-w.stopNow:
			return false
		case <-time.After(500 * time.Millisecond):
		}
	}
	return true
}
func (w *podWorker) shutdownNow() { w.stopOnce.Do(func() { close(w.stopNow) }); <-w.finished }

func (w *podWorker) current() *corev1.Pod {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pod
}

func (w *podWorker) kick() {
	select {
	case w.statusKick <- struct{}{}:
	default:
	}
}

func (w *podWorker) logf(format string, args ...interface{}) {
	p := w.current()
	log.Printf("pod %s/%s: %s", p.Namespace, p.Name, fmt.Sprintf(format, args...))
}

func (w *podWorker) run() {
	defer close(w.finished)
	defer w.a.forget(w.uid)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.statusLoop(ctx)

	p := w.current()
	w.dir = w.a.l.run("agent", "pods", fmt.Sprintf("%s_%s_%s", p.Namespace, p.Name, p.UID))
	now := metav1.Now()
	w.mu.Lock()
	w.startTime = &now
	w.mu.Unlock()

	// A node whose kubelet is silent starts nothing.
	w.waitUnpaused()
	if w.current().DeletionTimestamp != nil {
		// First seen already terminating: the kubelet never starts such a pod.
		w.terminate(ctx, 0, true)
		w.teardown()
		return
	}
	if err := w.setup(ctx); err != nil {
		w.logf("cannot run: %v", err)
	}
	w.kick()

	// Wait for the reason to stop: deletion requested, object gone, or agent shutdown. On a
	// paused node nothing acts on a deletion until the node is back, as with a dead kubelet.
	for {
		p := w.current()
		if p.DeletionTimestamp != nil {
			if w.waitUnpaused() {
				w.terminate(ctx, gracePeriod(w.current()), true)
			} else {
				w.terminate(ctx, 0, false)
			}
			break
		}
		select {
		case <-w.changed:
			continue
		case <-w.goneCh:
			w.waitUnpaused()
			w.terminate(ctx, 0, false)
		case <-w.stopNow:
			w.terminate(ctx, 0, false)
		}
		break
	}
	w.teardown()
}

// setup prepares the network and volumes and starts the containers. Volumes can wait for
// a claim to bind, so it retries until the pod is deleted.
func (w *podWorker) setup(ctx context.Context) error {
	p := w.current()
	for _, c := range p.Spec.Containers {
		if len(c.Command) == 0 {
			msg := fmt.Sprintf("container %q has no command: kworld runs host executables and cannot run an image's entrypoint", c.Name)
			w.setWaiting("CreateContainerConfigError", msg)
			w.a.event(p, corev1.EventTypeWarning, "Failed", msg)
			return fmt.Errorf("%s", msg)
		}
	}
	if err := os.MkdirAll(w.dir, 0o755); err != nil {
		return err
	}
	var mounts map[string]string
	for {
		var err error
		mounts, err = w.prepareVolumes(ctx)
		if err == nil {
			break
		}
		w.setWaiting("ContainerCreating", err.Error())
		select {
		case <-time.After(time.Second):
		case <-w.goneCh:
			return err
		case <-w.stopNow:
			return err
		}
		if w.current().DeletionTimestamp != nil {
			return err
		}
	}
	ip, err := w.a.ips.take()
	if err != nil {
		return err
	}
	hostname := p.Name
	if p.Spec.Hostname != "" {
		hostname = p.Spec.Hostname
	}
	fqdn := hostname
	if p.Spec.Subdomain != "" {
		fqdn = fmt.Sprintf("%s.%s.%s.svc.cluster.local", hostname, p.Spec.Subdomain, p.Namespace)
	}
	pn, err := createPodNetwork(string(p.UID), ip, hostname, fqdn, p.Namespace)
	if err != nil {
		w.a.ips.give(ip)
		w.setWaiting("ContainerCreating", "network: "+err.Error())
		w.a.event(p, corev1.EventTypeWarning, "FailedCreatePodSandBox", err.Error())
		return err
	}
	w.mu.Lock()
	w.net = pn
	w.waitReason, w.waitMessage = "", ""
	w.mu.Unlock()
	if err := w.runInitContainers(p, hostname, mounts); err != nil {
		return err
	}
	for _, c := range p.Spec.Containers {
		cr := newContainerRunner(w, c, hostname, mounts)
		w.mu.Lock()
		w.containers = append(w.containers, cr)
		w.mu.Unlock()
		go cr.loop()
	}
	return nil
}

// runInitContainers runs the pod's init containers one at a time to completion, as the
// kubelet does, before any container starts. One that fails (or cannot start) runs again
// after a second unless the restartPolicy is Never; meanwhile the containers wait with
// reason PodInitializing or Init:Error. Their statuses are not reported.
func (w *podWorker) runInitContainers(p *corev1.Pod, hostname string, mounts map[string]string) error {
	for _, ic := range p.Spec.InitContainers {
		for {
			w.setWaiting("PodInitializing", fmt.Sprintf("init container %s is running", ic.Name))
			code, err := w.runToCompletion(newContainerRunner(w, ic, hostname, mounts))
			if err == nil && code == 0 {
				break
			}
			msg := fmt.Sprintf("init container %s exited with %d (its log: %s)", ic.Name, code, filepath.Join(w.dir, ic.Name+".log"))
			if err != nil {
				msg = fmt.Sprintf("init container %s: %v", ic.Name, err)
			}
			w.setWaiting("Init:Error", msg)
			w.a.event(p, corev1.EventTypeWarning, "Failed", msg)
			if p.Spec.RestartPolicy == corev1.RestartPolicyNever {
				return fmt.Errorf("%s", msg)
			}
			select {
			case <-time.After(time.Second):
			case <-w.goneCh:
				return fmt.Errorf("deleted during init: %s", msg)
			case <-w.stopNow:
				return fmt.Errorf("stopped during init: %s", msg)
			}
			if w.current().DeletionTimestamp != nil {
				return fmt.Errorf("deleted during init: %s", msg)
			}
		}
	}
	w.setWaiting("", "")
	return nil
}

// runToCompletion starts c's process and waits for its exit code; a deletion or the agent's
// shutdown kills it.
func (w *podWorker) runToCompletion(c *containerRunner) (int32, error) {
	exited, err := c.start()
	if err != nil {
		return -1, err
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-exited:
			st := c.status().State.Terminated
			if st == nil {
				return -1, fmt.Errorf("exited without a status")
			}
			return st.ExitCode, nil
		case <-w.goneCh:
		case <-w.stopNow:
		case <-tick.C:
			if w.current().DeletionTimestamp == nil {
				continue
			}
		}
		c.mu.Lock()
		pid := c.pid
		c.mu.Unlock()
		killGroup(pid, syscall.SIGKILL)
		<-exited
		return -1, fmt.Errorf("killed: the pod is going away")
	}
}

func (w *podWorker) setWaiting(reason, msg string) {
	w.mu.Lock()
	changed := w.waitReason != reason || w.waitMessage != msg
	w.waitReason, w.waitMessage = reason, msg
	w.mu.Unlock()
	if changed {
		w.kick()
	}
}

// prepareVolumes returns, per volume name, the host directory that backs it.
func (w *podWorker) prepareVolumes(ctx context.Context) (map[string]string, error) {
	p := w.current()
	dirs := map[string]string{}
	for _, v := range p.Spec.Volumes {
		local := filepath.Join(w.dir, "volumes", v.Name)
		switch {
		case v.PersistentVolumeClaim != nil:
			pvc, err := w.a.cs.CoreV1().PersistentVolumeClaims(p.Namespace).Get(ctx, v.PersistentVolumeClaim.ClaimName, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("volume %q: %v", v.Name, err)
			}
			if pvc.Spec.VolumeName == "" {
				return nil, fmt.Errorf("volume %q: claim %s is not bound yet", v.Name, pvc.Name)
			}
			pv, err := w.a.cs.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("volume %q: %v", v.Name, err)
			}
			switch {
			case pv.Spec.HostPath != nil:
				dirs[v.Name] = pv.Spec.HostPath.Path
			case pv.Spec.Local != nil:
				dirs[v.Name] = pv.Spec.Local.Path
			default:
				return nil, fmt.Errorf("volume %q: PersistentVolume %s is neither hostPath nor local", v.Name, pv.Name)
			}
			if !readWriteMany(pv) {
				if holder, ok := w.a.attach(dirs[v.Name], w.uid); !ok {
					msg := fmt.Sprintf("Multi-Attach error for volume %q Volume is already exclusively attached to one pod (%s) and can't be attached to another", pv.Name, holder)
					if !w.multiAttachSaid {
						w.multiAttachSaid = true
						w.a.event(p, corev1.EventTypeWarning, "FailedAttachVolume", msg)
					}
					return nil, fmt.Errorf("%s", msg)
				}
				w.mu.Lock()
				w.attached = append(w.attached, dirs[v.Name])
				w.mu.Unlock()
			}
			if err := os.MkdirAll(dirs[v.Name], 0o755); err != nil {
				return nil, err
			}
		case v.HostPath != nil:
			if err := checkHostPathType(v.HostPath); err != nil {
				return nil, fmt.Errorf("MountVolume.SetUp failed for volume %q : %v", v.Name, err)
			}
			dirs[v.Name] = v.HostPath.Path
		case v.ConfigMap != nil:
			cm, err := w.a.cs.CoreV1().ConfigMaps(p.Namespace).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("volume %q: %v", v.Name, err)
			}
			if err := writeFiles(local, cm.Data, nil); err != nil {
				return nil, err
			}
			dirs[v.Name] = local
		case v.Secret != nil:
			s, err := w.a.cs.CoreV1().Secrets(p.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("volume %q: %v", v.Name, err)
			}
			if err := writeFiles(local, nil, s.Data); err != nil {
				return nil, err
			}
			dirs[v.Name] = local
		default: // emptyDir, projected, downwardAPI: a directory that lives with the pod
			if err := os.MkdirAll(local, 0o755); err != nil {
				return nil, err
			}
			dirs[v.Name] = local
		}
	}
	if wantsToken(p) {
		dir, err := w.serviceAccountFiles(ctx, p)
		if err != nil {
			return nil, err
		}
		dirs[serviceAccountVolume] = dir
	}
	return dirs, nil
}

func readWriteMany(pv *corev1.PersistentVolume) bool {
	for _, m := range pv.Spec.AccessModes {
		if m == corev1.ReadWriteMany || m == corev1.ReadOnlyMany {
			return true
		}
	}
	return false
}

// releaseVolumes detaches this pod's volumes once its processes are gone.
func (w *podWorker) releaseVolumes() {
	w.mu.Lock()
	dirs := w.attached
	w.attached = nil
	w.mu.Unlock()
	for _, d := range dirs {
		w.a.detach(d, w.uid)
	}
}

func writeFiles(dir string, text map[string]string, bin map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for k, v := range text {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644); err != nil {
			return err
		}
	}
	for k, v := range bin {
		if err := os.WriteFile(filepath.Join(dir, k), v, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func gracePeriod(p *corev1.Pod) time.Duration {
	if p.DeletionGracePeriodSeconds != nil {
		return time.Duration(*p.DeletionGracePeriodSeconds) * time.Second
	}
	if p.Spec.TerminationGracePeriodSeconds != nil {
		return time.Duration(*p.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return 30 * time.Second
}

// terminate stops every container: preStop hook, SIGTERM, the rest of the grace period,
// SIGKILL. With graceful set (an API deletion) it then reports the final status and
// completes the deletion, as the kubelet does.
func (w *podWorker) terminate(ctx context.Context, grace time.Duration, graceful bool) {
	w.mu.Lock()
	cs := append([]*containerRunner(nil), w.containers...)
	w.mu.Unlock()
	if graceful {
		w.logf("terminating with grace period %v", grace)
	}
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func(c *containerRunner) { defer wg.Done(); c.stop(grace, graceful) }(c)
	}
	// A shorter grace period from the API (a second delete, an eviction with delete options)
	// or the object's removal (a force delete) does not change a termination under way: the
	// kubelet's SyncTerminatingPod runs on a context the pod worker cannot cancel (kubelet
	// 1.34, kubernetes#113606), so it ends with the grace period it began with. Seen on the
	// world's real-kubelet nodes: tests/e2e/world_fidelity.rs runs the same checks on both.
	wg.Wait()
	w.mu.Lock()
	w.terminated = true
	w.mu.Unlock()
	if !graceful {
		return
	}
	p := w.current()
	w.logf("containers stopped: completing the deletion")
	w.publish(ctx)
	zero := int64(0)
	err := w.a.cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &p.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		w.logf("completing deletion: %v", err)
	}
}

func (w *podWorker) teardown() {
	w.mu.Lock()
	pn := w.net
	w.net = nil
	w.mu.Unlock()
	w.releaseVolumes()
	if pn != nil {
		pn.destroy()
		w.a.ips.give(pn.ip)
	}
	// emptyDir and the other pod-lived volumes; persistent volumes live elsewhere.
	_ = os.RemoveAll(filepath.Join(w.dir, "volumes"))
}

// --- status ---------------------------------------------------------------------------------

func (w *podWorker) statusLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.statusKick:
		}
		time.Sleep(50 * time.Millisecond) // coalesce bursts of changes
		w.publish(ctx)
	}
}

func (w *podWorker) publish(ctx context.Context) {
	if w.a.paused(w.current().Spec.NodeName) {
		return // a silent kubelet writes nothing; the node's return republishes
	}
	status := w.computeStatus()
	w.mu.Lock()
	same := w.lastStatus != nil && reflect.DeepEqual(*w.lastStatus, status)
	w.mu.Unlock()
	if same {
		return
	}
	p := w.current()
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur, err := w.a.cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != w.uid {
			return nil
		}
		// A strategic-merge patch of the fields the kubelet owns: conditions merge by type,
		// so what others wrote (the scheduler's PodScheduled, the node controller's
		// DisruptionTarget) stays; the UID makes it a precondition.
		merged := mergeConditionTimes(cur.Status, status)
		var own []corev1.PodCondition
		for _, c := range merged.Conditions {
			if agentConditions[c.Type] {
				own = append(own, c)
			}
		}
		merged.Conditions = own
		patch, err := json.Marshal(map[string]interface{}{
			"metadata": map[string]interface{}{"uid": w.uid},
			"status":   merged,
		})
		if err != nil {
			return err
		}
		_, err = w.a.cs.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		return err
	})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			w.logf("status: %v", err)
		}
		return
	}
	w.mu.Lock()
	w.lastStatus = &status
	w.mu.Unlock()
}

// agentConditions are the pod conditions the kubelet owns.
var agentConditions = map[corev1.PodConditionType]bool{
	corev1.PodReady: true, corev1.ContainersReady: true, corev1.PodInitialized: true,
	corev1.PodReadyToStartContainers: true,
}

// mergeConditionTimes keeps the scheduler's conditions and the transition times of
// conditions whose status did not change.
func mergeConditionTimes(old, next corev1.PodStatus) corev1.PodStatus {
	out := next
	out.Conditions = nil
	mine := map[corev1.PodConditionType]bool{}
	for _, c := range next.Conditions {
		mine[c.Type] = true
		for _, o := range old.Conditions {
			if o.Type == c.Type && o.Status == c.Status {
				c.LastTransitionTime = o.LastTransitionTime
			}
		}
		out.Conditions = append(out.Conditions, c)
	}
	for _, o := range old.Conditions {
		if !mine[o.Type] {
			out.Conditions = append(out.Conditions, o)
		}
	}
	return out
}

func (w *podWorker) computeStatus() corev1.PodStatus {
	w.mu.Lock()
	p, pn, start, terminated := w.pod, w.net, w.startTime, w.terminated
	waitReason, waitMsg := w.waitReason, w.waitMessage
	cs := append([]*containerRunner(nil), w.containers...)
	w.mu.Unlock()

	// The QoS class the API server computed at creation: it is immutable, and a pod with
	// requests is Burstable or Guaranteed, not BestEffort.
	qos := p.Status.QOSClass
	if qos == "" {
		qos = corev1.PodQOSBestEffort
	}
	st := corev1.PodStatus{StartTime: start, HostIP: bridgeIP, HostIPs: []corev1.HostIP{{IP: bridgeIP}}, QOSClass: qos}
	if pn != nil {
		st.PodIP = pn.ip
		st.PodIPs = []corev1.PodIP{{IP: pn.ip}}
	}
	allReady, anyRunning, allDone, allOK := len(cs) > 0, false, len(cs) > 0, true
	byName := map[string]corev1.ContainerStatus{}
	for _, c := range cs {
		s := c.status()
		byName[s.Name] = s
		allReady = allReady && s.Ready
		if s.State.Running != nil {
			anyRunning = true
		}
		if s.State.Terminated == nil || c.willRestart() {
			allDone = false
		} else if s.State.Terminated.ExitCode != 0 {
			allOK = false
		}
	}
	for _, c := range p.Spec.Containers {
		s, ok := byName[c.Name]
		if !ok {
			reason := waitReason
			if reason == "" {
				reason = "ContainerCreating"
			}
			s = corev1.ContainerStatus{Name: c.Name, Image: c.Image, State: corev1.ContainerState{
				Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: waitMsg}}}
		}
		st.ContainerStatuses = append(st.ContainerStatuses, s)
	}
	switch {
	case len(cs) > 0 && (allDone || terminated):
		st.Phase = corev1.PodFailed
		if allOK && allTerminated(cs) {
			st.Phase = corev1.PodSucceeded
		}
	case anyRunning || hasStarted(cs):
		st.Phase = corev1.PodRunning
	default:
		st.Phase = corev1.PodPending
	}
	now := metav1.Now()
	cond := func(t corev1.PodConditionType, ok bool, reason string) corev1.PodCondition {
		s := corev1.ConditionFalse
		if ok {
			s, reason = corev1.ConditionTrue, ""
		}
		return corev1.PodCondition{Type: t, Status: s, Reason: reason, LastTransitionTime: now}
	}
	ready := allReady && !terminated
	st.Conditions = []corev1.PodCondition{
		cond(corev1.PodReadyToStartContainers, pn != nil, ""),
		cond(corev1.PodInitialized, true, ""),
		cond(corev1.ContainersReady, ready, "ContainersNotReady"),
		cond(corev1.PodReady, ready, "ContainersNotReady"),
	}
	return st
}

func allTerminated(cs []*containerRunner) bool {
	for _, c := range cs {
		if c.status().State.Terminated == nil {
			return false
		}
	}
	return true
}

func hasStarted(cs []*containerRunner) bool {
	for _, c := range cs {
		if c.status().RestartCount > 0 || c.status().State.Terminated != nil {
			return true
		}
	}
	return false
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// launchArgv wraps a container's command so it runs in the pod's network namespace, in a
// UTS namespace with the pod's hostname, and in a mount namespace where its volumes are
// bind-mounted at their mountPaths.
func launchArgv(netns, hostname, workdir string, binds [][2]string, cmd []string) []string {
	var sb strings.Builder
	sb.WriteString("set -e\nhostname " + shellQuote(hostname) + "\n")
	for _, b := range binds {
		sb.WriteString("mount --bind " + shellQuote(b[0]) + " " + shellQuote(b[1]) + "\n")
	}
	if workdir == "" {
		workdir = "/"
	}
	sb.WriteString("cd " + shellQuote(workdir) + "\nexec \"$@\"\n")
	argv := []string{"unshare", "--uts", "--", "ip", "netns", "exec", netns, "/bin/sh", "-c", sb.String(), "kworld-launch"}
	return append(argv, cmd...)
}

// nsenterArgv runs a command inside a running container's namespaces (exec probes and hooks).
func nsenterArgv(pid int, cmd []string) []string {
	return append([]string{"nsenter", "-t", fmt.Sprint(pid), "-m", "-u", "-n", "--"}, cmd...)
}

// killGroup signals the container's process group once (the process leads its group).
func killGroup(pid int, sig syscall.Signal) {
	if pid <= 0 {
		return
	}
	if err := syscall.Kill(-pid, sig); err != nil {
		_ = syscall.Kill(pid, sig)
	}
}

func runWithTimeout(argv []string, timeout time.Duration, env []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return runWithContext(ctx, argv, env)
}

// runWithContext runs a command in a process group of its own; when ctx ends the whole
// group is killed and the wait for its output is bounded, so a hook that left a child
// behind (`sleep`) cannot outlive its time.
// env is the command's environment (the container's); nil inherits the agent's.
func runWithContext(ctx context.Context, argv []string, env []string) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 500 * time.Millisecond
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return fmt.Errorf("cut off: %v", ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// checkHostPathType makes or checks a hostPath volume's path as its type asks, as the
// kubelet's hostPath plugin does (pkg/volume/hostpath: DirectoryOrCreate makes a missing
// directory with 0755, FileOrCreate an empty file with 0644; the other types must already be
// what they name; no type, no check).
func checkHostPathType(h *corev1.HostPathVolumeSource) error {
	if h.Type == nil || *h.Type == corev1.HostPathUnset {
		return nil
	}
	path := h.Path
	st, err := os.Stat(path)
	switch *h.Type {
	case corev1.HostPathDirectoryOrCreate:
		if os.IsNotExist(err) {
			return os.MkdirAll(path, 0o755)
		}
		if err == nil && !st.IsDir() {
			return fmt.Errorf("hostPath type check failed: %s is not a directory", path)
		}
	case corev1.HostPathFileOrCreate:
		if os.IsNotExist(err) {
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			return f.Close()
		}
		if err == nil && st.IsDir() {
			return fmt.Errorf("hostPath type check failed: %s is not a file", path)
		}
	case corev1.HostPathDirectory:
		if err != nil || !st.IsDir() {
			return fmt.Errorf("hostPath type check failed: %s is not a directory", path)
		}
	case corev1.HostPathFile:
		if err != nil || st.IsDir() {
			return fmt.Errorf("hostPath type check failed: %s is not a file", path)
		}
	default:
		if err != nil {
			return fmt.Errorf("hostPath type check failed: %s does not exist", path)
		}
	}
	return err
}
