package main

// The kubelet's streaming API for the nodes the agent stands in for: port-forward, exec and
// container logs, reached by the API server's pods/portforward, pods/exec and pods/log as on
// a real cluster (so `kubectl port-forward`, `kubectl exec` and `kubectl logs` work). The
// protocol handling (SPDY and WebSocket streams, their framing and status) is Kubernetes' own
// kubelet streaming code, k8s.io/kubelet/pkg/cri/streaming; the agent only says where the
// bytes go: a TCP connection to the pod's IP, a command run in the container's namespaces
// with its environment, the container's log file.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	remotecommandconsts "k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/kubelet/pkg/cri/streaming/portforward"
	criremotecommand "k8s.io/kubelet/pkg/cri/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

const (
	// kubeletBasePort + N is node kworld-N's kubelet port (one agent, several nodes, one IP).
	kubeletBasePort = 10250
	// The kubelet's defaults (streamingConnectionIdleTimeout, DefaultStreamCreationTimeout).
	streamIdleTimeout     = 4 * time.Hour
	streamCreationTimeout = 30 * time.Second
)

// kubeletPort is the port node `name` serves its kubelet API on, as its status says.
func kubeletPort(name string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(name, "kworld-"))
	if err != nil {
		return kubeletBasePort
	}
	return kubeletBasePort + n
}

// serveKubeletAPI listens on the node's kubelet port with a serving certificate from the
// world's CA, and requires a client certificate from the same CA (the API server's
// kubelet-client certificate), as a kubelet with x509 client authentication does.
func (a *agent) serveKubeletAPI(node string) error {
	caPEM, err := os.ReadFile(a.l.pki("ca.crt"))
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cert, err := tls.LoadX509KeyPair(a.l.pki("kubelet.crt"), a.l.pki("kubelet.key"))
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/portForward/{ns}/{pod}", func(w http.ResponseWriter, r *http.Request) {
		a.portForward(node, w, r)
	})
	mux.HandleFunc("/exec/{ns}/{pod}/{container}", func(w http.ResponseWriter, r *http.Request) {
		a.exec(node, w, r)
	})
	mux.HandleFunc("/containerLogs/{ns}/{pod}/{container}", func(w http.ResponseWriter, r *http.Request) {
		a.containerLogs(node, w, r)
	})
	ln, err := net.Listen("tcp", net.JoinHostPort(bridgeIP, strconv.Itoa(kubeletPort(node))))
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler: mux,
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{cert},
			ClientCAs:    pool,
			ClientAuth:   tls.RequireAndVerifyClientCert,
			MinVersion:   tls.VersionTLS12,
		},
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() {
		if err := srv.ServeTLS(ln, "", ""); err != nil && err != http.ErrServerClosed {
			log.Printf("agent: kubelet API of %s: %v", node, err)
		}
	}()
	return nil
}

// worker finds the running pod ns/name on node, or answers 404.
func (a *agent) worker(node string, w http.ResponseWriter, r *http.Request) *podWorker {
	ns, name := r.PathValue("ns"), r.PathValue("pod")
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, pw := range a.workers {
		p := pw.current()
		if p != nil && p.Namespace == ns && p.Name == name && p.Spec.NodeName == node {
			return pw
		}
	}
	http.Error(w, fmt.Sprintf("pod %s/%s not found on node %s", ns, name, node), http.StatusNotFound)
	return nil
}

// container finds a container of the pod by name (or its only one when name is empty).
func (pw *podWorker) container(name string) *containerRunner {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	for _, c := range pw.containers {
		if c.spec.Name == name || (name == "" && len(pw.containers) == 1) {
			return c
		}
	}
	return nil
}

// forwarder copies a port-forward stream to and from the pod's IP.
type forwarder struct{ pw *podWorker }

func (f forwarder) PortForward(ctx context.Context, _ string, _ types.UID, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	f.pw.mu.Lock()
	pn := f.pw.net
	f.pw.mu.Unlock()
	if pn == nil {
		return fmt.Errorf("the pod has no network")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(pn.ip, strconv.Itoa(int(port))))
	if err != nil {
		return fmt.Errorf("port %d: %v", port, err)
	}
	defer conn.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(conn, stream); done <- struct{}{} }()
	go func() { _, _ = io.Copy(stream, conn); done <- struct{}{} }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}

func (a *agent) portForward(node string, w http.ResponseWriter, r *http.Request) {
	pw := a.worker(node, w, r)
	if pw == nil {
		return
	}
	opts, err := portforward.NewV4Options(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	portforward.ServePortForward(w, r, forwarder{pw}, r.PathValue("pod"), pw.uid, opts,
		streamIdleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
}

// executor runs a command in the container's namespaces with the container's environment.
type executor struct{ c *containerRunner }

func (e executor) ExecInContainer(ctx context.Context, _ string, _ types.UID, _ string, cmd []string, in io.Reader, out, errw io.WriteCloser, _ bool, _ <-chan remotecommand.TerminalSize, _ time.Duration) error {
	e.c.mu.Lock()
	pid := e.c.pid
	e.c.mu.Unlock()
	if pid <= 0 {
		return fmt.Errorf("container %q is not running", e.c.spec.Name)
	}
	argv := nsenterArgv(pid, cmd)
	p := exec.CommandContext(ctx, argv[0], argv[1:]...)
	p.Env = e.c.execEnv()
	p.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.Stdin, p.Stdout = in, out
	if errw != nil {
		p.Stderr = errw
	} else {
		p.Stderr = out
	}
	err := p.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return utilexec.CodeExitError{Err: ee, Code: ee.ExitCode()}
	}
	return err
}

// workerContainer finds the running pod and the container the request names, or answers 404.
func (a *agent) workerContainer(node string, w http.ResponseWriter, r *http.Request) (*podWorker, *containerRunner) {
	pw := a.worker(node, w, r)
	if pw == nil {
		return nil, nil
	}
	c := pw.container(r.PathValue("container"))
	if c == nil {
		http.Error(w, fmt.Sprintf("container %q not found", r.PathValue("container")), http.StatusNotFound)
		return nil, nil
	}
	return pw, c
}

func (a *agent) exec(node string, w http.ResponseWriter, r *http.Request) {
	pw, c := a.workerContainer(node, w, r)
	if c == nil {
		return
	}
	opts, err := criremotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	criremotecommand.ServeExec(w, r, executor{c}, r.PathValue("pod"), pw.uid, c.spec.Name,
		r.URL.Query()[corev1.ExecCommandParam], opts, streamIdleTimeout, streamCreationTimeout,
		remotecommandconsts.SupportedStreamingProtocols)
}

// containerLogs serves the container's log file: tailLines, limitBytes and follow as the
// kubelet reads them (timestamps and previous are not kept by the agent).
func (a *agent) containerLogs(node string, w http.ResponseWriter, r *http.Request) {
	pw, c := a.workerContainer(node, w, r)
	if c == nil {
		return
	}
	q := r.URL.Query()
	f, err := os.Open(filepath.Join(pw.dir, c.spec.Name+".log"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	defer f.Close()
	data, _ := io.ReadAll(f)
	if n, err := strconv.Atoi(q.Get("tailLines")); err == nil && n >= 0 {
		lines := strings.SplitAfter(string(data), "\n")
		if len(lines) > 0 && lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		data = []byte(strings.Join(lines, ""))
	}
	if n, err := strconv.Atoi(q.Get("limitBytes")); err == nil && n >= 0 && len(data) > n {
		data = data[:n]
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write(data)
	if q.Get("follow") != "true" {
		return
	}
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}
	rd := bufio.NewReader(f)
	for {
		select {
		case <-r.Context().Done():
			return
		case <-pw.finished:
			return
		case <-time.After(200 * time.Millisecond):
		}
		chunk, _ := io.ReadAll(rd)
		if len(chunk) > 0 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
	}
}
