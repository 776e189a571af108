package main

// In-cluster API access, as the kubelet and kube-proxy give it: the API server reachable
// from pods (at the bridge address, which its certificate names), KUBERNETES_SERVICE_HOST
// and _PORT in every container, and a ServiceAccount token, the cluster CA and the namespace
// at /var/run/secrets/kubernetes.io/serviceaccount in pods that ask for them.
//
// One difference from Kubernetes, on purpose: a token is mounted only where the pod sets
// automountServiceAccountToken: true itself (Kubernetes mounts one unless it is false), so the
// world's other pods keep running exactly as before.

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"strconv"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// The volume key under which a pod's token directory is kept with its volumes (no
	// volume of a pod can have this name: it is not a DNS label).
	serviceAccountVolume = "kube-api-access (kworld)"
	serviceAccountPath   = "/var/run/secrets/kubernetes.io/serviceaccount"
)

// serveAPIForPods forwards bridgeIP:apiPort to the API server, which listens on loopback.
func serveAPIForPods() error {
	return forwardTCP(net.JoinHostPort(bridgeIP, strconv.Itoa(apiPort)), net.JoinHostPort("127.0.0.1", strconv.Itoa(apiPort)))
}

// forwardTCP accepts connections on listen and joins each to a new one to upstream.
func forwardTCP(listen, upstream string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				log.Printf("agent: forwarder %s: %v", listen, err)
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", upstream)
				if err != nil {
					return
				}
				defer u.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return nil
}

// wantsToken: the pod asks for its ServiceAccount's token itself.
func wantsToken(p *corev1.Pod) bool {
	return p.Spec.AutomountServiceAccountToken != nil && *p.Spec.AutomountServiceAccountToken
}

// serviceAccountFiles writes the pod's token (bound to the pod), the cluster CA and its
// namespace into a directory of the pod's, as the kubelet's projected volume does.
func (w *podWorker) serviceAccountFiles(ctx context.Context, p *corev1.Pod) (string, error) {
	sa := p.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	secs := int64(3600)
	tok, err := w.a.cs.CoreV1().ServiceAccounts(p.Namespace).CreateToken(ctx, sa, &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{
			ExpirationSeconds: &secs,
			BoundObjectRef:    &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of ServiceAccount %s: %v", sa, err)
	}
	ca, err := os.ReadFile(w.a.l.pki("ca.crt"))
	if err != nil {
		return "", err
	}
	dir := filepath.Join(w.dir, "volumes", "kube-api-access")
	return dir, writeFiles(dir, map[string]string{"token": tok.Status.Token, "ca.crt": string(ca), "namespace": p.Namespace}, nil)
}
