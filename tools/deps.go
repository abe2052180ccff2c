//go:build tools

// Package tools pins modules the relay will use before their first import.
package tools

import (
	_ "cloud.google.com/go/pubsub/v2"
	_ "cloud.google.com/go/pubsub/v2/pstest"
	_ "github.com/aws/aws-sdk-go-v2/config"
	_ "github.com/aws/aws-sdk-go-v2/service/eventbridge"
	_ "github.com/aws/aws-sdk-go-v2/service/kinesis"
	_ "github.com/aws/aws-sdk-go-v2/service/sts"
	_ "github.com/aws/smithy-go"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/rabbitmq/amqp091-go"
	_ "github.com/redis/go-redis/v9"
	_ "github.com/spf13/cobra"
	_ "go.yaml.in/yaml/v3"
	_ "google.golang.org/grpc"
)
