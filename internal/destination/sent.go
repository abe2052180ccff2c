package destination

// Sent is a message as a connector's bus receives it, rebuilt from its log entry for
// the console's attempt detail: exactly one of the connector's parts is set.
type Sent struct {
	Connector   string            `json:"connector"`
	EventBridge *EventBridgeEntry `json:"eventbridge,omitempty"`
	Kinesis     *KinesisRecord    `json:"kinesis,omitempty"`
	PubSub      *PubSubMessage    `json:"pubsub,omitempty"`
}

// EventBridgeEntry is one PutEvents entry.
type EventBridgeEntry struct {
	EventBusName string `json:"event_bus_name"`
	Source       string `json:"source"`
	DetailType   string `json:"detail_type"`
	Detail       string `json:"detail"`
	Time         string `json:"time,omitempty"`
}

// KinesisRecord is one PutRecord: the record's data (flattened JSON text) and key.
type KinesisRecord struct {
	StreamARN    string `json:"stream_arn"`
	PartitionKey string `json:"partition_key"`
	Data         string `json:"data"`
}

// PubSubMessage is one published message: its data, attributes and ordering key.
type PubSubMessage struct {
	Topic       string            `json:"topic"`
	Data        string            `json:"data"`
	Attributes  map[string]string `json:"attributes"`
	OrderingKey string            `json:"ordering_key"`
}
