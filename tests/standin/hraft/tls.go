package main

// Consul's HTTPS API (`ports { https = 8501 }`, `tls { https { verify_incoming = true } }`):
// the API served over TLS from the server's certificate, client certificates required and
// verified against the CA when -verify-incoming is set; peers' APIs reached over HTTPS with
// the server's own certificate as the client's (as Consul's verify_outgoing). -probe is the
// readiness check a kubelet cannot make once client certificates are required (Consul's Helm
// chart runs an exec probe too).

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

type tlsFiles struct {
	cert, key, ca  string
	verifyIncoming bool
}

func (f tlsFiles) pool() (*x509.CertPool, error) {
	if f.ca == "" {
		return nil, errors.New("-tls-ca is needed with -https")
	}
	pem, err := os.ReadFile(f.ca)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificate in it", f.ca)
	}
	return pool, nil
}

func (f tlsFiles) pair() (tls.Certificate, error) {
	if f.cert == "" || f.key == "" {
		return tls.Certificate{}, errors.New("-tls-cert and -tls-key are needed with -https")
	}
	return tls.LoadX509KeyPair(f.cert, f.key)
}

// load reads the CA and the server's certificate and key.
func (f tlsFiles) load() (*x509.CertPool, tls.Certificate, error) {
	pool, err := f.pool()
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	pair, err := f.pair()
	return pool, pair, err
}

// serverConfig serves the API with the server's certificate, requiring a client certificate
// the CA signed when verify_incoming is on.
func (f tlsFiles) serverConfig() (*tls.Config, error) {
	pool, pair, err := f.load()
	if err != nil {
		return nil, err
	}
	c := &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, MinVersion: tls.VersionTLS12}
	if f.verifyIncoming {
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// clientConfig reaches a peer's HTTPS API: its certificate verified against the CA (by the
// peer's DNS name, the host of its Raft address), the server's own presented.
func (f tlsFiles) clientConfig() (*tls.Config, error) {
	pool, pair, err := f.load()
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// probe GETs url with the server's TLS files (the certificate verified for serverName) and
// says whether it answered 200.
func probe(f tlsFiles, url string, serverName string) error {
	c, err := f.clientConfig()
	if err != nil {
		return err
	}
	c.ServerName = serverName
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: c}, Timeout: 3 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", url, resp.Status, body)
	}
	return nil
}
