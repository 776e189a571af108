package main

// The replicated state: a key/value map, so tests can write through Raft and read back.
// Each entry remembers the Raft indexes that created and last modified it, as Consul's KV
// entries carry CreateIndex and ModifyIndex.

import (
	"encoding/json"
	"io"
	"sync"

	"github.com/hashicorp/raft"
)

type kvEntry struct {
	Value       []byte
	CreateIndex uint64
	ModifyIndex uint64
}

type kvCommand struct {
	Op    string // "set" or "delete"
	Key   string
	Value []byte
}

type kvFSM struct {
	mu   sync.RWMutex
	data map[string]kvEntry
}

func newFSM() *kvFSM { return &kvFSM{data: map[string]kvEntry{}} }

func (f *kvFSM) Apply(l *raft.Log) interface{} {
	var c kvCommand
	if err := json.Unmarshal(l.Data, &c); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch c.Op {
	case "set":
		e, ok := f.data[c.Key]
		if !ok {
			e.CreateIndex = l.Index
		}
		e.Value, e.ModifyIndex = c.Value, l.Index
		f.data[c.Key] = e
	case "delete":
		delete(f.data, c.Key)
	}
	return nil
}

func (f *kvFSM) get(k string) (kvEntry, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	e, ok := f.data[k]
	return e, ok
}

func (f *kvFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	copied := make(map[string]kvEntry, len(f.data))
	for k, v := range f.data {
		copied[k] = v
	}
	return kvSnapshot(copied), nil
}

func (f *kvFSM) Restore(r io.ReadCloser) error {
	defer r.Close()
	data := map[string]kvEntry{}
	if err := json.NewDecoder(r).Decode(&data); err != nil {
		return err
	}
	f.mu.Lock()
	f.data = data
	f.mu.Unlock()
	return nil
}

type kvSnapshot map[string]kvEntry

func (s kvSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode(map[string]kvEntry(s)); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s kvSnapshot) Release() {}
