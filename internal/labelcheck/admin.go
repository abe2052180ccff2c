package labelcheck

import (
	"context"

	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	gax "github.com/googleapis/gax-go/v2"
)

// Admin reads topics with the Pub/Sub admin API (GetTopic, which roles/pubsub.viewer
// allows), one attempt per read.
type Admin struct{ Client *vkit.TopicAdminClient }

// GetTopic returns the topic's labels. The library would retry UNAVAILABLE and the like
// for up to a minute; WithRetry(nil) makes it one attempt, so dispatch sees the code
// (not taken) and paces the retry itself.
func (a Admin) GetTopic(ctx context.Context, name string) (map[string]string, error) {
	t, err := a.Client.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: name}, gax.WithRetry(nil))
	if err != nil {
		return nil, err
	}
	return t.GetLabels(), nil
}
