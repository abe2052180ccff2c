package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
)

// routeLibraryLogs sends what go-redis and OpenTelemetry print into log as JSON lines,
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
