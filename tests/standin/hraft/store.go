package main

// A raft.LogStore and raft.StableStore on one bbolt file (DATA/raft.db), so a restarted pod
// keeps its log, term and vote. github.com/hashicorp/raft-boltdb/v2 v2.3.1 would be the usual
// choice, but it imports github.com/hashicorp/go-metrics/compat, which go-metrics v0.7.0 (the
// version raft v1.8.0 requires) no longer has, so the two do not build together.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
)

var (
	bucketLogs = []byte("logs")
	bucketConf = []byte("conf")
	// raft compares the error text: a missing key must read "not found".
	errKeyNotFound = errors.New("not found")
)

type boltStore struct{ db *bolt.DB }

func openBoltStore(path string) (*boltStore, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(bucketLogs); err != nil {
			return err
		}
		_, err := tx.CreateBucketIfNotExists(bucketConf)
		return err
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return &boltStore{db: db}, nil
}

func (b *boltStore) Close() error { return b.db.Close() }

// Log keys are big-endian indexes, so bbolt's byte order is log order.
func key(i uint64) []byte {
	k := make([]byte, 8)
	binary.BigEndian.PutUint64(k, i)
	return k
}

func (b *boltStore) FirstIndex() (uint64, error) { return b.edge(true) }
func (b *boltStore) LastIndex() (uint64, error)  { return b.edge(false) }

func (b *boltStore) edge(first bool) (idx uint64, err error) {
	err = b.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketLogs).Cursor()
		k, _ := c.Last()
		if first {
			k, _ = c.First()
		}
		if k != nil {
			idx = binary.BigEndian.Uint64(k)
		}
		return nil
	})
	return idx, err
}

func (b *boltStore) GetLog(index uint64, out *raft.Log) error {
	return b.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketLogs).Get(key(index))
		if v == nil {
			return raft.ErrLogNotFound
		}
		return json.Unmarshal(v, out)
	})
}

func (b *boltStore) StoreLog(l *raft.Log) error { return b.StoreLogs([]*raft.Log{l}) }

func (b *boltStore) StoreLogs(logs []*raft.Log) error {
	return b.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucketLogs)
		for _, l := range logs {
			v, err := json.Marshal(l)
			if err != nil {
				return err
			}
			if err := bk.Put(key(l.Index), v); err != nil {
				return err
			}
		}
		return nil
	})
}

func (b *boltStore) DeleteRange(min, max uint64) error {
	return b.db.Update(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketLogs).Cursor()
		for k, _ := c.Seek(key(min)); k != nil && binary.BigEndian.Uint64(k) <= max; k, _ = c.Next() {
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return nil
	})
}

func (b *boltStore) Set(k, v []byte) error {
	return b.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketConf).Put(k, v) })
}

func (b *boltStore) Get(k []byte) (v []byte, err error) {
	err = b.db.View(func(tx *bolt.Tx) error {
		got := tx.Bucket(bucketConf).Get(k)
		if got == nil {
			return errKeyNotFound
		}
		v = append([]byte(nil), got...)
		return nil
	})
	return v, err
}

func (b *boltStore) SetUint64(k []byte, v uint64) error { return b.Set(k, key(v)) }

func (b *boltStore) GetUint64(k []byte) (uint64, error) {
	v, err := b.Get(k)
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(v), nil
}
