package ingest

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// defaultFrameMax is the frame max the relay asks for: RabbitMQ's default, and
// amqp091-go's.
const defaultFrameMax = 131072

// dialFiltered opens an AMQP connection to url as amqp.DialConfig does, but with a
// headerFilter between the socket (TCP, or TLS for amqps://) and the client. It returns
// the connection and the filter's nonce, which unreadableReason needs.
func dialFiltered(url string, config amqp.Config) (*amqp.Connection, string, error) {
	uri, err := amqp.ParseURI(url)
	if err != nil {
		return nil, "", err // amqp091-go's URI errors never echo the password
	}
	if config.SASL == nil {
		for _, m := range uri.AuthMechanism {
			switch strings.ToUpper(m) {
			case "PLAIN":
				config.SASL = append(config.SASL, uri.PlainAuth())
			case "AMQPLAIN":
				config.SASL = append(config.SASL, uri.AMQPlainAuth())
			case "EXTERNAL":
				config.SASL = append(config.SASL, &amqp.ExternalAuth{})
			default:
				return nil, "", fmt.Errorf("unsupported auth_mechanism %q", m)
			}
		}
		if config.SASL == nil {
			config.SASL = []amqp.Authentication{uri.PlainAuth()}
		}
	}
	if config.Vhost == "" {
		config.Vhost = uri.Vhost
	}
	if config.ChannelMax == 0 {
		config.ChannelMax = uri.ChannelMax
	}
	if config.Locale == "" {
		config.Locale = "en_US"
	}
	if config.FrameSize == 0 {
		config.FrameSize = defaultFrameMax
	}
	timeout := 30 * time.Second
	if uri.ConnectionTimeout != 0 {
		timeout = time.Duration(uri.ConnectionTimeout) * time.Millisecond
	}
	// The deadline covers the TLS and AMQP handshakes; amqp.Open clears it once open.
	conn, err := amqp.DefaultDial(timeout)("tcp", net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port)))
	if err != nil {
		return nil, "", err
	}
	if uri.Scheme == "amqps" {
		tc, err := tlsConfig(uri)
		if err != nil {
			conn.Close()
			return nil, "", err
		}
		client := tls.Client(conn, tc)
		if err := client.Handshake(); err != nil {
			conn.Close()
			return nil, "", err
		}
		conn = client
	}
	var n [16]byte
	_, _ = rand.Read(n[:]) // crypto/rand.Read never fails
	nonce := hex.EncodeToString(n[:])
	c, err := amqp.Open(newHeaderFilter(conn, nonce, config.FrameSize), config)
	if err != nil {
		conn.Close()
		return nil, "", err
	}
	return c, nonce, nil
}

// tlsConfig is amqp091-go's TLS configuration for an amqps:// URI: its certfile,
// keyfile, cacertfile and server_name_indication parameters.
func tlsConfig(uri amqp.URI) (*tls.Config, error) {
	tc := &tls.Config{ServerName: uri.ServerName, MinVersion: tls.VersionTLS12}
	if tc.ServerName == "" {
		tc.ServerName = uri.Host
	}
	if uri.CACertFile != "" {
		pem, err := os.ReadFile(uri.CACertFile)
		if err != nil {
			return nil, fmt.Errorf("read CA certificate: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		tc.RootCAs.AppendCertsFromPEM(pem)
	}
	if uri.CertFile != "" && uri.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(uri.CertFile, uri.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
