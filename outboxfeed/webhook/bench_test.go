package webhook

const benchReceiverEnv = "HERALD_WEBHOOK_BENCH_RECEIVER"

func runBenchReceiver() int { return 0 }
