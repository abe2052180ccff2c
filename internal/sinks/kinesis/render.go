package kinesis

import (
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
)

// Render is the record Send writes for m (flattened body and partition key), without
// writing it.
func (s *Sink) Render(d destination.Destination, m destination.Message) (destination.Sent, error) {
	data, err := flatten(m.Body())
	if err != nil {
		return destination.Sent{}, failures.NewRejected("the event's body could not be flattened into a Kinesis record", err)
	}
	return destination.Sent{Connector: string(destination.Kinesis), Kinesis: &destination.KinesisRecord{
		StreamARN: d.StreamARN, PartitionKey: partitionKey(d, m), Data: string(data)}}, nil
}
