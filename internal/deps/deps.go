// Package deps pins the modules Herald depends on while packages are being
// written in parallel; removed once every dependency has a real importer.
package deps

import (
	_ "github.com/coder/websocket"
	_ "github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/redis/go-redis/v9"
	_ "go.uber.org/goleak"
	_ "modernc.org/sqlite"
)
