package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// sample is one series of a Prometheus text exposition.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// scrape is one reading of the server's /metrics.
type scrape []sample

// readMetrics fetches and parses base/metrics. The server exposes the Go
// collector (go_goroutines, go_memstats_*), the process collector
// (process_cpu_seconds_total, process_resident_memory_bytes) and Herald's
// own series (herald_connections, herald_disconnects_total, …).
func readMetrics(ctx context.Context, hc *http.Client, base string) (scrape, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, fmt.Errorf("connbench: metrics: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("connbench: metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("connbench: metrics: status %s", resp.Status)
	}
	var out scrape
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if s, ok := parseSample(sc.Text()); ok {
			out = append(out, s)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("connbench: metrics: %w", err)
	}
	return out, nil
}

// parseSample parses one exposition line, `name{k="v",…} value`; comments,
// blank lines and anything it does not understand are skipped.
func parseSample(line string) (sample, bool) {
	line = strings.TrimSpace(line)
	if line == "" || line[0] == '#' {
		return sample{}, false
	}
	var s sample
	rest := line
	if i := strings.IndexByte(line, '{'); i >= 0 {
		j := strings.LastIndexByte(line, '}')
		if j < i {
			return sample{}, false
		}
		s.name, rest = line[:i], line[j+1:]
		s.labels = parseLabels(line[i+1 : j])
	} else {
		i := strings.IndexByte(line, ' ')
		if i < 0 {
			return sample{}, false
		}
		s.name, rest = line[:i], line[i:]
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return sample{}, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return sample{}, false
	}
	s.value = v
	return s, true
}

// parseLabels parses k="v",k2="v2" (values with escaped quotes included).
func parseLabels(s string) map[string]string {
	m := make(map[string]string)
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq < 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			return m
		}
		key := strings.TrimSpace(s[:eq])
		var val strings.Builder
		i := eq + 2
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
			}
			val.WriteByte(s[i])
		}
		m[key] = val.String()
		s = strings.TrimLeft(s[min(i+1, len(s)):], ", ")
	}
	return m
}

// value is the sum of every series of name whose labels include match.
func (sc scrape) value(name string, match map[string]string) (float64, bool) {
	var sum float64
	found := false
	for _, s := range sc {
		if s.name != name || !labelsMatch(s.labels, match) {
			continue
		}
		sum += s.value
		found = true
	}
	return sum, found
}

// byLabel sums the series of name that match, grouped by the value of
// label.
func (sc scrape) byLabel(name, label string, match map[string]string) map[string]float64 {
	out := make(map[string]float64)
	for _, s := range sc {
		if s.name == name && labelsMatch(s.labels, match) {
			out[s.labels[label]] += s.value
		}
	}
	return out
}

func labelsMatch(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
