package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// containerRunner runs one container as a host process: start, probe, restart per the
// pod's restartPolicy, stop with its preStop hook.
type containerRunner struct {
	w        *podWorker
	spec     corev1.Container
	hostname string
	volumes  map[string]string

	mu  sync.Mutex
	pid int
	// env is the current process's environment: exec probes and hooks run with it, as
	// CRI exec runs commands with the container's environment.
	env       []string
	exited    chan struct{} // closed when the current process exits
	restarts  int32
	state     corev1.ContainerState
	lastState corev1.ContainerState
	ready     bool
	started   bool // the startup probe passed (or there is none)
	stopping  bool
	done      chan struct{} // closed when loop returns
}

func newContainerRunner(w *podWorker, spec corev1.Container, hostname string, volumes map[string]string) *containerRunner {
	return &containerRunner{w: w, spec: spec, hostname: hostname, volumes: volumes, done: make(chan struct{}),
		state: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
}

func (c *containerRunner) status() corev1.ContainerStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	started := c.started && c.state.Running != nil
	return corev1.ContainerStatus{Name: c.spec.Name, Image: c.spec.Image, ImageID: "kworld://" + c.spec.Image,
		ContainerID: fmt.Sprintf("kworld://%d", c.pid), State: c.state, LastTerminationState: c.lastState,
		Ready: c.ready, RestartCount: c.restarts, Started: &started}
}

func (c *containerRunner) willRestart() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopping || c.state.Terminated == nil {
		return false
	}
	switch c.w.current().Spec.RestartPolicy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return c.state.Terminated.ExitCode != 0
	}
	return true
}

func (c *containerRunner) set(f func()) {
	c.mu.Lock()
	f()
	c.mu.Unlock()
	c.w.kick()
}

func (c *containerRunner) isStopping() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopping
}

// The kubelet's crash-loop back-off: the first restart at once, then 10 s doubling to 5 min,
// reset after 10 min of running. KWORLD_BACKOFF_SCALE (a factor, e.g. 0.1) shortens it on
// purpose for tests that are not about back-off.
var (
	backoffScale   = envFloat("KWORLD_BACKOFF_SCALE", 1)
	backoffInitial = scaled(10 * time.Second)
	backoffMax     = scaled(300 * time.Second)
	backoffReset   = scaled(10 * time.Minute)
)

func envFloat(name string, def float64) float64 {
	if v, err := strconv.ParseFloat(os.Getenv(name), 64); err == nil && v > 0 {
		return v
	}
	return def
}

func scaled(d time.Duration) time.Duration { return time.Duration(float64(d) * backoffScale) }

func (c *containerRunner) loop() {
	defer close(c.done)
	backoff := time.Duration(0)
	for !c.isStopping() {
		exited, err := c.start()
		if err != nil {
			c.set(func() {
				c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "RunContainerError", Message: err.Error()}}
			})
			c.w.a.event(c.w.current(), corev1.EventTypeWarning, "Failed", fmt.Sprintf("Error: container %q: %v", c.spec.Name, err))
		} else {
			ctx, cancel := context.WithCancel(context.Background())
			go c.probeAll(ctx)
			started := time.Now()
			<-exited
			cancel()
			if time.Since(started) > backoffReset {
				backoff = 0
			}
		}
		if c.isStopping() || !c.willRestartAfterExit(err) {
			return
		}
		// A process that never started is not a restart: the pod stays Pending, as with the
		// kubelet, and the container keeps its RunContainerError reason.
		if err == nil {
			c.set(func() {
				c.restarts++
				if c.state.Terminated != nil {
					c.lastState = c.state
				}
				c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
					Message: fmt.Sprintf("back-off %v restarting failed container %s", backoff, c.spec.Name)}}
			})
			if backoff > 0 {
				c.w.a.event(c.w.current(), corev1.EventTypeWarning, "BackOff", fmt.Sprintf("Back-off restarting failed container %s", c.spec.Name))
			}
		}
		// Wait out the back-off, but not past a deletion (stop() marks it).
		for until := time.Now().Add(backoff); time.Now().Before(until) && !c.isStopping(); {
			select {
			case <-time.After(min(100*time.Millisecond, time.Until(until))):
			case <-c.w.stopNow:
				return
			case <-c.w.goneCh:
				return
			}
		}
		switch {
		case backoff == 0:
			backoff = backoffInitial
		case backoff < backoffMax:
			backoff = min(backoff*2, backoffMax)
		}
	}
}

func (c *containerRunner) willRestartAfterExit(startErr error) bool {
	if startErr != nil {
		return c.w.current().Spec.RestartPolicy != corev1.RestartPolicyNever
	}
	return c.willRestart()
}

// start launches the process and returns a channel closed when it exits.
func (c *containerRunner) start() (chan struct{}, error) {
	p := c.w.current()
	env, lookup, err := c.w.containerEnv(p, c.spec)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.env = env
	c.mu.Unlock()
	cmd := make([]string, 0, len(c.spec.Command)+len(c.spec.Args))
	for _, s := range append(append([]string{}, c.spec.Command...), c.spec.Args...) {
		cmd = append(cmd, expandVars(s, lookup))
	}
	if _, err := exec.LookPath(cmd[0]); err != nil {
		return nil, fmt.Errorf("executable %q not found on the node: %v", cmd[0], err)
	}
	var binds [][2]string
	for _, m := range c.spec.VolumeMounts {
		src, ok := c.volumes[m.Name]
		if !ok {
			return nil, fmt.Errorf("volume mount %q names no volume", m.Name)
		}
		if m.SubPath != "" {
			src = filepath.Join(src, m.SubPath)
			if err := os.MkdirAll(src, 0o755); err != nil {
				return nil, err
			}
		}
		if err := ensureMountpoint(c.w.a.l, m.MountPath); err != nil {
			return nil, fmt.Errorf("mount point %s: %v", m.MountPath, err)
		}
		binds = append(binds, [2]string{src, m.MountPath})
	}
	if dir, ok := c.volumes[serviceAccountVolume]; ok {
		if err := ensureMountpoint(c.w.a.l, serviceAccountPath); err != nil {
			return nil, fmt.Errorf("mount point %s: %v", serviceAccountPath, err)
		}
		binds = append(binds, [2]string{dir, serviceAccountPath})
	}
	c.w.mu.Lock()
	pn := c.w.net
	c.w.mu.Unlock()
	if pn == nil {
		return nil, fmt.Errorf("pod network is gone")
	}
	logf, err := os.OpenFile(filepath.Join(c.w.dir, c.spec.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	argv := launchArgv(pn.ns, c.hostname, c.spec.WorkingDir, binds, cmd)
	proc := exec.Command(argv[0], argv[1:]...)
	proc.Env = env
	proc.Stdout, proc.Stderr = logf, logf
	proc.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := proc.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	exited := make(chan struct{})
	now := metav1.Now()
	c.set(func() {
		c.pid = proc.Process.Pid
		c.exited = exited
		c.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
		c.ready = c.spec.ReadinessProbe == nil && c.spec.StartupProbe == nil
		c.started = c.spec.StartupProbe == nil
	})
	go func() {
		err := proc.Wait()
		logf.Close()
		code := int32(0)
		reason := "Completed"
		if err != nil {
			reason = "Error"
			code = 1
			if ee, ok := err.(*exec.ExitError); ok {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok {
					if ws.Signaled() {
						code = 128 + int32(ws.Signal())
					} else {
						code = int32(ws.ExitStatus())
					}
				}
			}
		}
		fin := metav1.Now()
		c.set(func() {
			c.ready = false
			c.state = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: code, Reason: reason, StartedAt: now, FinishedAt: fin, ContainerID: fmt.Sprintf("kworld://%d", c.pid)}}
		})
		close(exited)
	}()
	return exited, nil
}

// stop runs the preStop hook (when graceful), then SIGTERM, then SIGKILL once the grace
// period is over; the hook counts against the grace period as in the kubelet.
func (c *containerRunner) stop(grace time.Duration, graceful bool) {
	c.mu.Lock()
	c.stopping = true
	pid, exited := c.pid, c.exited
	running := c.state.Running != nil
	c.mu.Unlock()
	if running && exited != nil {
		if graceful {
			c.w.a.event(c.w.current(), corev1.EventTypeNormal, "Killing", fmt.Sprintf("Stopping container %s", c.spec.Name))
			c.kill(pid, exited, grace, true)
		} else {
			killGroup(pid, syscall.SIGKILL)
			<-exited
		}
	}
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
	}
}

// kill stops the current process as the kubelet's killContainer does: the preStop hook
// (cut off when the grace period ends), SIGTERM, and SIGKILL when what is left of the grace
// period (at least 2 s after a hook) runs out.
func (c *containerRunner) kill(pid int, exited chan struct{}, grace time.Duration, withHook bool) {
	begun := time.Now()
	deadline := begun.Add(grace)
	if withHook && c.spec.Lifecycle != nil && c.spec.Lifecycle.PreStop != nil {
		ctx, cancel := context.WithCancel(context.Background())
		hookDone := make(chan error, 1)
		go func() { hookDone <- c.runHandler(ctx, c.spec.Lifecycle.PreStop, pid) }()
	hook:
		for {
			select {
			case err := <-hookDone:
				if err != nil {
					c.w.a.event(c.w.current(), corev1.EventTypeWarning, "FailedPreStopHook",
						fmt.Sprintf("PreStopHook failed for container %q: %v", c.spec.Name, err))
				}
				break hook
			case <-time.After(time.Until(deadline)):
				cancel()
				<-hookDone
				c.w.a.event(c.w.current(), corev1.EventTypeWarning, "FailedPreStopHook",
					fmt.Sprintf("PreStop hook for container %q did not complete within the grace period", c.spec.Name))
				break hook
			case <-exited:
				cancel()
				<-hookDone
				break hook
			}
		}
		cancel()
		c.w.logf("container %s: preStop hook over after %v", c.spec.Name, time.Since(begun).Round(time.Millisecond))
		if min := time.Now().Add(2 * time.Second); deadline.Before(min) {
			deadline = min // the kubelet's minimum after a hook
		}
	}
	killGroup(pid, syscall.SIGTERM)
	for {
		select {
		case <-exited:
			c.w.logf("container %s: exited after SIGTERM, %v after the kill began", c.spec.Name, time.Since(begun).Round(time.Millisecond))
			return
		case <-time.After(time.Until(deadline)):
			killGroup(pid, syscall.SIGKILL)
			<-exited
			c.w.logf("container %s: killed (SIGKILL) at the end of its grace period, %v after the kill began", c.spec.Name, time.Since(begun).Round(time.Millisecond))
			return
		}
	}
}

// runHandler runs a lifecycle hook until it ends or ctx does.
func (c *containerRunner) runHandler(ctx context.Context, h *corev1.LifecycleHandler, pid int) error {
	switch {
	case h.Exec != nil:
		return runWithContext(ctx, nsenterArgv(pid, h.Exec.Command), c.execEnv())
	case h.HTTPGet != nil:
		errc := make(chan error, 1)
		go func() { errc <- c.httpGet(h.HTTPGet, 10*time.Minute) }()
		select {
		case err := <-errc:
			return err
		case <-ctx.Done():
			return fmt.Errorf("cut off: %v", ctx.Err())
		}
	case h.Sleep != nil:
		select {
		case <-time.After(time.Duration(h.Sleep.Seconds) * time.Second):
			return nil
		case <-ctx.Done():
			return fmt.Errorf("cut off: %v", ctx.Err())
		}
	}
	return fmt.Errorf("unsupported handler")
}

// execEnv is the environment commands run in the container get: the container's own.
func (c *containerRunner) execEnv() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.env...)
}

func (c *containerRunner) podIP() string {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	if c.w.net == nil {
		return ""
	}
	return c.w.net.ip
}

func (c *containerRunner) resolvePort(port intstr.IntOrString) (int, error) {
	if port.Type == intstr.Int {
		return port.IntValue(), nil
	}
	for _, p := range c.spec.Ports {
		if p.Name == port.StrVal {
			return int(p.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(port.StrVal); err == nil {
		return n, nil
	}
	return 0, fmt.Errorf("no container port named %q", port.StrVal)
}

func (c *containerRunner) httpGet(g *corev1.HTTPGetAction, timeout time.Duration) error {
	port, err := c.resolvePort(g.Port)
	if err != nil {
		return err
	}
	host := g.Host
	if host == "" {
		host = c.podIP()
	}
	scheme := "http"
	if g.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	path := g.Path
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, strconv.Itoa(port)), path), nil)
	if err != nil {
		return err
	}
	for _, h := range g.HTTPHeaders {
		req.Header.Set(h.Name, h.Value)
	}
	client := &http.Client{Timeout: timeout, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}, //nolint:gosec // probes skip verification, like the kubelet
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("HTTP probe failed with statuscode: %d", resp.StatusCode)
	}
	return nil
}

func (c *containerRunner) runProbe(p *corev1.Probe) error {
	timeout := time.Duration(p.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = time.Second
	}
	switch {
	case p.HTTPGet != nil:
		return c.httpGet(p.HTTPGet, timeout)
	case p.TCPSocket != nil:
		port, err := c.resolvePort(p.TCPSocket.Port)
		if err != nil {
			return err
		}
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(c.podIP(), strconv.Itoa(port)), timeout)
		if err != nil {
			return err
		}
		return conn.Close()
	case p.Exec != nil:
		c.mu.Lock()
		pid := c.pid
		c.mu.Unlock()
		return runWithTimeout(nsenterArgv(pid, p.Exec.Command), timeout, c.execEnv())
	}
	return fmt.Errorf("unsupported probe")
}

// probeAll runs the startup probe, then readiness and liveness, for one process lifetime.
func (c *containerRunner) probeAll(ctx context.Context) {
	if sp := c.spec.StartupProbe; sp != nil {
		if !c.probeUntil(ctx, sp, "Startup", func(ok bool) bool { return ok }) {
			return
		}
		c.set(func() {
			c.started = true
			c.ready = c.spec.ReadinessProbe == nil
		})
	}
	if rp := c.spec.ReadinessProbe; rp != nil {
		go c.probeUntil(ctx, rp, "Readiness", nil)
	}
	if lp := c.spec.LivenessProbe; lp != nil {
		go c.probeUntil(ctx, lp, "Liveness", nil)
	}
}

// probeUntil runs one probe on its schedule. With stopOn set it returns once stopOn says so
// (the startup probe); readiness flips c.ready; liveness and startup failures kill the
// process so the loop restarts it.
func (c *containerRunner) probeUntil(ctx context.Context, p *corev1.Probe, kind string, stopOn func(bool) bool) bool {
	period := time.Duration(p.PeriodSeconds) * time.Second
	if period <= 0 {
		period = 10 * time.Second
	}
	failTh, okTh := int(p.FailureThreshold), int(p.SuccessThreshold)
	if failTh <= 0 {
		failTh = 3
	}
	if okTh <= 0 {
		okTh = 1
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Duration(p.InitialDelaySeconds) * time.Second):
	}
	fails, oks := 0, 0
	for {
		// A silent kubelet probes nothing; liveness and startup stop once deletion starts
		// (prober/worker.go: "Pod deletion requested, setting probe result to success").
		node := c.w.current().Spec.NodeName
		if kind != "Readiness" && (c.isStopping() || c.w.current().DeletionTimestamp != nil) {
			return false
		}
		if c.w.a.paused(node) {
			select {
			case <-ctx.Done():
				return false
			case <-time.After(period):
			}
			continue
		}
		err := c.runProbe(p)
		if err == nil {
			fails, oks = 0, oks+1
		} else {
			fails, oks = fails+1, 0
		}
		if ctx.Err() != nil {
			return false
		}
		if stopOn != nil && err == nil && stopOn(true) {
			return true
		}
		switch kind {
		case "Readiness":
			if oks >= okTh {
				c.set(func() { c.ready = true })
			} else if fails >= failTh {
				if fails == failTh {
					c.w.a.event(c.w.current(), corev1.EventTypeWarning, "Unhealthy", fmt.Sprintf("Readiness probe failed: %v", err))
				}
				c.set(func() { c.ready = false })
			}
		default:
			if fails >= failTh {
				if c.isStopping() || c.w.current().DeletionTimestamp != nil {
					return false
				}
				c.w.a.event(c.w.current(), corev1.EventTypeWarning, "Unhealthy", fmt.Sprintf("%s probe failed: %v", kind, err))
				c.w.a.event(c.w.current(), corev1.EventTypeNormal, "Killing",
					fmt.Sprintf("Container %s failed %s probe, will be restarted", c.spec.Name, strings.ToLower(kind)))
				c.mu.Lock()
				pid, exited := c.pid, c.exited
				c.mu.Unlock()
				// As the kubelet: preStop, SIGTERM, the grace period (the probe's, else the pod's).
				grace := gracePeriod(c.w.current())
				if p.TerminationGracePeriodSeconds != nil {
					grace = time.Duration(*p.TerminationGracePeriodSeconds) * time.Second
				}
				c.kill(pid, exited, grace, true)
				return false
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(period):
		}
	}
}

// containerEnv builds the process environment: a base PATH, the container's env with
// downward-API fields and ConfigMap/Secret keys, each value $(VAR)-expanded against the
// ones before it, as the kubelet does.
func (w *podWorker) containerEnv(p *corev1.Pod, c corev1.Container) ([]string, func(string) (string, bool), error) {
	vals := map[string]string{}
	order := []string{"PATH", "HOME", "HOSTNAME"}
	vals["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	vals["HOME"] = "/root"
	vals["HOSTNAME"] = p.Name
	// The API server, as the kubelet names it to every container (see incluster.go).
	order = append(order, "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")
	vals["KUBERNETES_SERVICE_HOST"] = bridgeIP
	vals["KUBERNETES_SERVICE_PORT"] = strconv.Itoa(apiPort)
	lookup := func(k string) (string, bool) { v, ok := vals[k]; return v, ok }
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = v
	}
	ctx := context.Background()
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef != nil {
			cm, err := w.a.cs.CoreV1().ConfigMaps(p.Namespace).Get(ctx, ef.ConfigMapRef.Name, metav1.GetOptions{})
			if err != nil {
				return nil, nil, fmt.Errorf("envFrom: %v", err)
			}
			for k, v := range cm.Data {
				set(ef.Prefix+k, v)
			}
		}
	}
	podIP := ""
	w.mu.Lock()
	if w.net != nil {
		podIP = w.net.ip
	}
	w.mu.Unlock()
	for _, e := range c.Env {
		v := expandVars(e.Value, lookup)
		if e.ValueFrom != nil {
			switch {
			case e.ValueFrom.FieldRef != nil:
				v = fieldValue(p, e.ValueFrom.FieldRef.FieldPath, podIP)
			case e.ValueFrom.ConfigMapKeyRef != nil:
				r := e.ValueFrom.ConfigMapKeyRef
				cm, err := w.a.cs.CoreV1().ConfigMaps(p.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
				if err != nil {
					return nil, nil, fmt.Errorf("env %s: %v", e.Name, err)
				}
				v = cm.Data[r.Key]
			case e.ValueFrom.SecretKeyRef != nil:
				r := e.ValueFrom.SecretKeyRef
				s, err := w.a.cs.CoreV1().Secrets(p.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
				if err != nil {
					return nil, nil, fmt.Errorf("env %s: %v", e.Name, err)
				}
				v = string(s.Data[r.Key])
			}
		}
		set(e.Name, v)
	}
	env := make([]string, 0, len(order))
	for _, k := range order {
		env = append(env, k+"="+vals[k])
	}
	return env, lookup, nil
}

func fieldValue(p *corev1.Pod, path, podIP string) string {
	switch path {
	case "metadata.name":
		return p.Name
	case "metadata.namespace":
		return p.Namespace
	case "metadata.uid":
		return string(p.UID)
	case "spec.nodeName":
		return p.Spec.NodeName
	case "spec.serviceAccountName":
		return p.Spec.ServiceAccountName
	case "status.podIP", "status.podIPs":
		return podIP
	case "status.hostIP", "status.hostIPs":
		return bridgeIP
	}
	for _, pre := range []struct {
		prefix string
		m      map[string]string
	}{{"metadata.labels['", p.Labels}, {"metadata.annotations['", p.Annotations}} {
		if strings.HasPrefix(path, pre.prefix) && strings.HasSuffix(path, "']") {
			return pre.m[strings.TrimSuffix(strings.TrimPrefix(path, pre.prefix), "']")]
		}
	}
	return ""
}

// expandVars implements Kubernetes' $(VAR) expansion: $$ escapes, unknown names stay as written.
func expandVars(s string, lookup func(string) (string, bool)) string {
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			out.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			out.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				out.WriteString(s[i:])
				return out.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok {
				out.WriteString(v)
			} else {
				out.WriteString("$(" + name + ")")
			}
			i += 2 + end
		default:
			out.WriteByte(s[i])
		}
	}
	return out.String()
}
