package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

const provisionerName = "kworld.local/hostpath"

// agent is the kubelet's stand-in for every node of the world, plus the two cluster
// services a kubelet-only world lacks: a DNS server and a volume provisioner.
type agent struct {
	l        layout
	cs       *kubernetes.Clientset
	nodes    map[string]bool
	ips      *ipPool
	mu       sync.Mutex
	workers  map[types.UID]*podWorker
	slices   cache.Indexer
	services cache.Indexer
	// volumeUsers maps a persistent volume's directory to the pod using it: a ReadWriteOnce
	// volume is attached to one pod at a time, as a block device is to one node.
	volumeUsers map[string]types.UID
}

func cmdAgent(args []string) error {
	fs := flag.NewFlagSet("agent", flag.ExitOnError)
	nodes := fs.Int("nodes", 4, "nodes to register")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig")
	_ = fs.Parse(args)
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 200, 400
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	a := &agent{l: worldLayout(), cs: cs, nodes: map[string]bool{}, ips: newIPPool(),
		workers: map[types.UID]*podWorker{}, volumeUsers: map[string]types.UID{}}
	for i := 1; i <= *nodes; i++ {
		a.nodes[fmt.Sprintf("kworld-%d", i)] = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)

	for n := range a.nodes {
		if err := a.registerNode(ctx, n); err != nil {
			return fmt.Errorf("registering node %s: %w", n, err)
		}
		go a.heartbeat(ctx, n)
		if err := a.serveKubeletAPI(n); err != nil {
			return fmt.Errorf("kubelet API of node %s: %w", n, err)
		}
	}
	if err := a.serveDNS(); err != nil {
		return fmt.Errorf("DNS server on %s:53: %w", bridgeIP, err)
	}
	if err := serveAPIForPods(); err != nil {
		return fmt.Errorf("the API server for pods on %s:%d: %w", bridgeIP, apiPort, err)
	}
	if err := serveKubernetesService(); err != nil {
		return fmt.Errorf("the kubernetes Service on %s:443: %w", kubernetesServiceIP, err)
	}

	factory := informers.NewSharedInformerFactory(cs, 0)
	podInf := factory.Core().V1().Pods().Informer()
	_, _ = podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o interface{}) { a.podChanged(o.(*corev1.Pod)) },
		UpdateFunc: func(_, o interface{}) { a.podChanged(o.(*corev1.Pod)) },
		DeleteFunc: func(o interface{}) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				a.podDeleted(p)
			}
		},
	})
	pvcInf := factory.Core().V1().PersistentVolumeClaims().Informer()
	_, _ = pvcInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o interface{}) { a.provision(ctx, o.(*corev1.PersistentVolumeClaim)) },
		UpdateFunc: func(_, o interface{}) { a.provision(ctx, o.(*corev1.PersistentVolumeClaim)) },
	})
	pvInf := factory.Core().V1().PersistentVolumes().Informer()
	_, _ = pvInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o interface{}) { a.reclaim(ctx, o.(*corev1.PersistentVolume)) },
		UpdateFunc: func(_, o interface{}) { a.reclaim(ctx, o.(*corev1.PersistentVolume)) },
	})
	sliceInf := factory.Discovery().V1().EndpointSlices().Informer()
	_ = sliceInf.AddIndexers(cache.Indexers{"service": func(o interface{}) ([]string, error) {
		s := o.(*discoveryv1.EndpointSlice)
		return []string{s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName]}, nil
	}})
	a.slices = sliceInf.GetIndexer()
	a.services = factory.Core().V1().Services().Informer().GetIndexer()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	log.Printf("agent: %d nodes registered, watching pods", len(a.nodes))

	<-sigs
	log.Printf("agent: stopping every pod")
	a.stopAll()
	return nil
}

func (a *agent) registerNode(ctx context.Context, name string) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
			"kworld.local/node": "true", realKindLabel: "agent"}},
	}
	_, err := a.cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return a.postNodeStatus(ctx, name)
}

func (a *agent) postNodeStatus(ctx context.Context, name string) error {
	node, err := a.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	now := metav1.Now()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("8"),
		corev1.ResourceMemory: resource.MustParse("16Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	node.Status.Capacity, node.Status.Allocatable = capacity, capacity
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: bridgeIP}, {Type: corev1.NodeHostName, Address: name}}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(kubeletPort(name))
	node.Status.NodeInfo = corev1.NodeSystemInfo{KubeletVersion: "v1.34.4-kworld", OperatingSystem: "linux", Architecture: "amd64",
		ContainerRuntimeVersion: "kworld://processes"}
	conds := []corev1.NodeCondition{
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory"},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure"},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID"},
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kworld agent is posting ready status"},
	}
	for i := range conds {
		conds[i].LastHeartbeatTime = now
		conds[i].LastTransitionTime = now
		for _, old := range node.Status.Conditions {
			if old.Type == conds[i].Type && old.Status == conds[i].Status {
				conds[i].LastTransitionTime = old.LastTransitionTime
			}
		}
	}
	node.Status.Conditions = conds
	_, err = a.cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	return err
}

// heartbeat renews the node's Lease every 2 s and posts its status every 10 s, unless the
// node is paused (a pause file exists): then it goes silent, as a failed kubelet does, and its
// pods' status, probes and deletions wait for it. A node that is down (node-down) also has
// every pod process frozen until it comes back.
func (a *agent) heartbeat(ctx context.Context, name string) {
	lastStatus := time.Now()
	wasPaused, frozen := false, false
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
		down := a.down(name)
		if down != frozen {
			a.freezeNode(name, down)
			frozen = down
		}
		if a.paused(name) {
			wasPaused = true
			continue
		}
		if err := a.renewLease(ctx, name); err != nil {
			log.Printf("lease %s: %v", name, err)
		}
		if wasPaused || time.Since(lastStatus) > 10*time.Second {
			if err := a.postNodeStatus(ctx, name); err != nil {
				log.Printf("node status %s: %v", name, err)
			} else {
				if wasPaused {
					a.kickNode(name) // the kubelet is back: it reports every pod as it is
				}
				lastStatus, wasPaused = time.Now(), false
			}
		}
	}
}

// paused: the node's kubelet is silent (node-pause or node-down).
func (a *agent) paused(node string) bool {
	_, err := os.Stat(a.l.pauseFile(node))
	return err == nil
}

// down: the node is lost with its pods (node-down), until its time is up.
func (a *agent) down(node string) bool {
	b, err := os.ReadFile(a.l.downFile(node))
	if err != nil {
		return false
	}
	var until int64
	if _, err := fmt.Sscan(string(b), &until); err == nil && time.Now().Unix() >= until {
		_ = os.Remove(a.l.downFile(node))
		_ = os.Remove(a.l.pauseFile(node))
		return false
	}
	return true
}

// attach takes a volume directory for a pod; the holder when another pod has it.
func (a *agent) attach(dir string, uid types.UID) (types.UID, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if holder, ok := a.volumeUsers[dir]; ok && holder != uid {
		return holder, false
	}
	a.volumeUsers[dir] = uid
	return uid, true
}

func (a *agent) detach(dir string, uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.volumeUsers[dir] == uid {
		delete(a.volumeUsers, dir)
	}
}

func (a *agent) nodeWorkers(node string) []*podWorker {
	a.mu.Lock()
	defer a.mu.Unlock()
	var ws []*podWorker
	for _, w := range a.workers {
		if w.current().Spec.NodeName == node {
			ws = append(ws, w)
		}
	}
	return ws
}

func (a *agent) kickNode(node string) {
	for _, w := range a.nodeWorkers(node) {
		w.mu.Lock()
		w.lastStatus = nil
		w.mu.Unlock()
		w.kick()
	}
}

// freezeNode stops (or continues) every process of the node's pods.
func (a *agent) freezeNode(node string, freeze bool) {
	sig := syscall.SIGCONT
	if freeze {
		sig = syscall.SIGSTOP
	}
	n := 0
	for _, w := range a.nodeWorkers(node) {
		w.mu.Lock()
		cs := append([]*containerRunner(nil), w.containers...)
		w.mu.Unlock()
		for _, c := range cs {
			c.mu.Lock()
			pid := c.pid
			c.mu.Unlock()
			killGroup(pid, sig)
			n++
		}
	}
	log.Printf("node %s: %d pod processes %s", node, n, map[bool]string{true: "frozen (node down)", false: "thawed"}[freeze])
}

func (a *agent) renewLease(ctx context.Context, name string) error {
	leases := a.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       coordv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](16), RenewTime: &now},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	l.Spec.RenewTime = &now
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

func (a *agent) podChanged(p *corev1.Pod) {
	if !a.nodes[p.Spec.NodeName] {
		return
	}
	a.mu.Lock()
	w := a.workers[p.UID]
	if w == nil {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			a.mu.Unlock()
			return
		}
		w = newPodWorker(a, p)
		a.workers[p.UID] = w
		go w.run()
	}
	a.mu.Unlock()
	w.update(p)
}

func (a *agent) podDeleted(p *corev1.Pod) {
	a.mu.Lock()
	w := a.workers[p.UID]
	a.mu.Unlock()
	if w != nil {
		w.gone()
	}
}

func (a *agent) forget(uid types.UID) {
	a.mu.Lock()
	delete(a.workers, uid)
	a.mu.Unlock()
}

func (a *agent) stopAll() {
	a.mu.Lock()
	ws := make([]*podWorker, 0, len(a.workers))
	for _, w := range a.workers {
		ws = append(ws, w)
	}
	a.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func(w *podWorker) { defer wg.Done(); w.shutdownNow() }(w)
	}
	wg.Wait()
}

func (a *agent) event(p *corev1.Pod, kind, reason, msg string) {
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: p.Name + ".", Namespace: p.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID,
			APIVersion: "v1", ResourceVersion: p.ResourceVersion},
		Reason: reason, Message: msg, Type: kind, FirstTimestamp: now, LastTimestamp: now, Count: 1,
		Source: corev1.EventSource{Component: "kubelet", Host: p.Spec.NodeName},
	}
	if _, err := a.cs.CoreV1().Events(p.Namespace).Create(context.Background(), ev, metav1.CreateOptions{}); err != nil {
		log.Printf("event %s/%s %s: %v", p.Namespace, p.Name, reason, err)
	}
}

// --- DNS: the cluster DNS of this world ---------------------------------------------------

// resolve answers as cluster DNS does, from EndpointSlices: HOST.SERVICE.NS.svc.cluster.local
// only for a headless Service's endpoint with that hostname, and SERVICE.NS.svc.cluster.local
// with the ready addresses of the Service's EndpointSlices (there is no kube-proxy here, so a
// ClusterIP Service resolves to its endpoints). An endpoint is listed not ready unless the
// Service publishes not-ready addresses; a not-ready endpoint gets no record.
func (a *agent) resolve(name string) []string {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	rest, ok := strings.CutSuffix(name, ".svc.cluster.local")
	if !ok {
		return nil
	}
	parts := strings.Split(rest, ".")
	switch len(parts) {
	case 3:
		host, svc, ns := parts[0], parts[1], parts[2]
		o, ok, _ := a.services.GetByKey(ns + "/" + svc)
		if !ok || o.(*corev1.Service).Spec.ClusterIP != corev1.ClusterIPNone {
			return nil
		}
		objs, _ := a.slices.ByIndex("service", ns+"/"+svc)
		for _, o := range objs {
			for _, ep := range o.(*discoveryv1.EndpointSlice).Endpoints {
				if ep.Hostname != nil && *ep.Hostname == host && (ep.Conditions.Ready == nil || *ep.Conditions.Ready) {
					return ep.Addresses
				}
			}
		}
	case 2:
		objs, _ := a.slices.ByIndex("service", parts[1]+"/"+parts[0])
		var ips []string
		for _, o := range objs {
			for _, ep := range o.(*discoveryv1.EndpointSlice).Endpoints {
				if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
					ips = append(ips, ep.Addresses...)
				}
			}
		}
		return ips
	}
	return nil
}

func (a *agent) serveDNS() error {
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Authoritative = true
		found := false
		for _, q := range r.Question {
			ips := a.resolve(q.Name)
			if len(ips) > 0 {
				found = true
			}
			if q.Qtype != dns.TypeA {
				continue
			}
			for _, ip := range ips {
				rr, err := dns.NewRR(fmt.Sprintf("%s 5 IN A %s", q.Name, ip))
				if err == nil {
					m.Answer = append(m.Answer, rr)
				}
			}
		}
		if !found {
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})
	errs := make(chan error, 2)
	for _, netw := range []string{"udp", "tcp"} {
		srv := &dns.Server{Addr: bridgeIP + ":53", Net: netw, Handler: handler,
			NotifyStartedFunc: func() { errs <- nil }}
		go func() {
			if err := srv.ListenAndServe(); err != nil {
				errs <- err
			}
		}()
	}
	for i := 0; i < 2; i++ {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

// --- volumes: a provisioner of directories that outlive pods ------------------------------

func (a *agent) provision(ctx context.Context, pvc *corev1.PersistentVolumeClaim) {
	if pvc.Spec.VolumeName != "" || pvc.Status.Phase != corev1.ClaimPending || pvc.DeletionTimestamp != nil {
		return
	}
	if pvc.Spec.StorageClassName == nil || (*pvc.Spec.StorageClassName != storageClass && *pvc.Spec.StorageClassName != pinnedStorageClass) {
		return
	}
	class := *pvc.Spec.StorageClassName
	var affinity *corev1.VolumeNodeAffinity
	if class == pinnedStorageClass {
		node := pvc.Annotations["volume.kubernetes.io/selected-node"]
		if node == "" {
			return // WaitForFirstConsumer: the scheduler names the node first
		}
		affinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
		}}}}
	}
	name := "pvc-" + string(pvc.UID)
	path := a.l.run("agent", "volumes", name)
	if err := os.MkdirAll(path, 0o755); err != nil {
		log.Printf("provision %s: %v", name, err)
		return
	}
	size := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": provisionerName}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   pvc.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              class,
			NodeAffinity:                  affinity,
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: path, Type: ptr.To(corev1.HostPathDirectoryOrCreate)}},
		},
	}
	if _, err := a.cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		log.Printf("provision %s: %v", name, err)
	}
}

func (a *agent) reclaim(ctx context.Context, pv *corev1.PersistentVolume) {
	if pv.Annotations["pv.kubernetes.io/provisioned-by"] != provisionerName || pv.Status.Phase != corev1.VolumeReleased {
		return
	}
	if pv.Spec.HostPath != nil && strings.HasPrefix(pv.Spec.HostPath.Path, a.l.run("agent", "volumes")) {
		_ = os.RemoveAll(filepath.Clean(pv.Spec.HostPath.Path))
	}
	if err := a.cs.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		log.Printf("reclaim %s: %v", pv.Name, err)
	}
}
