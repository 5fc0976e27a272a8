//go:build !heraldstages

package main

import "github.com/heraldgw/herald/outboxfeed"

// stagePublisher is pub: only a diagnostic build (-tags heraldstages,
// stagetrace.go) times publications.
func stagePublisher(pub outboxfeed.Publisher) outboxfeed.Publisher { return pub }

func writeStageTrace() {}
