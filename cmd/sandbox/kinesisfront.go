package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// The Kinesis front: what the relay calls as aws.endpoints.kinesis (--kinesis), in front
// of a kinesalite started separately (--kinesalite), enforcing STS sessions and IAM
// policies on PutRecord(s) as AWS would.

// kinesisFront passes every call to kinesalite, but takes PutRecord(s) only when signed
// with a live session the sandbox's STS handed out, as AWS would for a customer's stream.
//
// kinesalite dies (an unhandled "aborted" error) when a client goes away in the middle
// of a call. So the front reads the whole request first, and finishes every call it
// starts with kinesalite, reading the whole answer, even when its own client has gone:
// a relay killed or a network path cut mid-call must not take kinesalite down with it.
func (s *sandbox) kinesisFront(upstream *url.URL) http.Handler {
	client := &http.Client{Timeout: 30 * time.Second}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return // the client went away before its request was whole: kinesalite never sees it
		}
		switch target := r.Header.Get("X-Amz-Target"); target {
		case "Kinesis_20131202.PutRecord", "Kinesis_20131202.PutRecords":
			action := "kinesis:" + strings.TrimPrefix(target, "Kinesis_20131202.")
			if f, ok := s.sts.Authorize(r, action, s.streamARN(body)); !ok {
				w.Header().Set("Content-Type", "application/x-amz-json-1.1")
				w.Header().Set("X-Amzn-ErrorType", f.Code)
				w.WriteHeader(f.Status)
				json.NewEncoder(w).Encode(map[string]string{"__type": f.Code, "message": f.Message})
				return
			}
		}
		target := *upstream
		target.Path, target.RawQuery = r.URL.Path, r.URL.RawQuery
		req, err := http.NewRequestWithContext(context.WithoutCancel(r.Context()), r.Method, target.String(), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		req.Header = r.Header.Clone()
		req.Header.Del("Connection")
		resp, err := client.Do(req)
		if err != nil {
			http.Error(w, "kinesalite: "+err.Error(), http.StatusBadGateway)
			return
		}
		answer, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			http.Error(w, "kinesalite: "+err.Error(), http.StatusBadGateway)
			return
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		w.Write(answer)
	})
}

// streamARN is the stream a Kinesis call names: its StreamARN, else its StreamName in
// the customer's account (--iam-account) and us-east-1.
func (s *sandbox) streamARN(body []byte) string {
	var in struct{ StreamARN, StreamName string }
	json.Unmarshal(body, &in)
	if in.StreamARN != "" {
		return in.StreamARN
	}
	return "arn:aws:kinesis:us-east-1:" + s.iam.account + ":stream/" + in.StreamName
}
