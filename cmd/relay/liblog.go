package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/aws/smithy-go/logging"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
)

// routeLibraryLogs sends what go-redis and OpenTelemetry print into log as JSON lines
// (the AWS SDK's config carries its own: awsLog, set in buildSinks),
// so every line on stderr is one a log pipeline can parse. Both libraries keep their
// logger process-wide (their API offers nothing else); serve sets it once, at start.
func routeLibraryLogs(log *slog.Logger) {
	redis.SetLogger(redisLog{log.With("component", "redis-client")})
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: "+err.Error(), "component", "tracing")
	}))
}

// redisLog is go-redis's Logging on slog: its lines are warnings (dial and pool failures).
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, fmt.Sprintf(format, v...))
}

// awsLog is the AWS SDK's logger on slog: its WARN lines as warnings, the rest as debug.
func awsLog(log *slog.Logger) logging.Logger {
	return logging.LoggerFunc(func(c logging.Classification, format string, v ...any) {
		level := slog.LevelDebug
		if c == logging.Warn {
			level = slog.LevelWarn
		}
		log.Log(context.Background(), level, fmt.Sprintf(format, v...))
	})
}
