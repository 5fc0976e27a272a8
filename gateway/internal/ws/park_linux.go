package ws

import (
	"errors"
	"sync"
	"syscall"
)

// An idle WebSocket holds no goroutine on Linux: between messages its
// reader parks the connection (frameWatch.park) with one epoll instance
// the process's connections share, whose one goroutine waits for every
// parked connection's next bytes and starts a reader for each connection
// they come to (poller.run). The runtime's own poller cannot do this: it
// wakes a goroutine that waits, so each idle connection would keep one,
// with its stack of at least 2 KiB and its descriptor.
//
// A parked connection is in the epoll set one-shot: the poller hears of
// its bytes, its end or an error once, and the reader it starts arms the
// connection again when it parks again. The descriptor is only ever
// handed to epoll inside RawConn.Control, so it is the connection's for
// the call however the connection is being closed meanwhile; a
// connection closed while parked (frameWatch.Close, by the library, when
// the server ends the connection) has its reader started at once, which
// finds the connection closed and ends it.

// parkState is a connection's side of the poller.
type parkState struct {
	mu     sync.Mutex
	parked bool   // in the epoll set and armed, resume not yet started
	closed bool   // Close ran: the connection is not parked again
	added  bool   // in the epoll set (added, not yet removed)
	fd     int32  // the descriptor it was added with
	gen    uint32 // told apart from an earlier connection on the same descriptor
	resume func() // started when the parked connection's bytes come
}

// poller is the process's epoll instance for parked connections. Its
// goroutine runs while connections are in the set: it ends with the last.
type poller struct {
	epfd int
	wake [2]int // a pipe in the set: a byte written tells run to look at n
	mu   sync.Mutex
	// conns are the connections in the epoll set, by descriptor. An
	// event names the descriptor and the connection's gen, so an event
	// of a connection gone since is recognized and dropped.
	conns   []*frameWatch
	n       int // connections in conns
	running bool
	gen     uint32
}

var (
	thePoller     *poller
	thePollerOnce sync.Once
)

// getPoller returns the process's poller, started on first use, or nil
// when there is none (epoll refused): connections then wait in a
// goroutine each (frameWatch.wait).
func getPoller() *poller {
	thePollerOnce.Do(func() {
		fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if err != nil {
			return
		}
		p := &poller{epfd: fd}
		if err := syscall.Pipe2(p.wake[:], syscall.O_NONBLOCK|syscall.O_CLOEXEC); err != nil {
			_ = syscall.Close(fd)
			return
		}
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(p.wake[0])}
		if err := syscall.EpollCtl(fd, syscall.EPOLL_CTL_ADD, p.wake[0], &ev); err != nil {
			_ = syscall.Close(fd)
			_ = syscall.Close(p.wake[0])
			_ = syscall.Close(p.wake[1])
			return
		}
		thePoller = p
	})
	return thePoller
}

// parks reports whether the connection's reader parks it between messages
// rather than waiting in a goroutine.
func (c *frameWatch) parks() bool { return c.sc != nil && getPoller() != nil }

// park arms the poller to start resume, on a goroutine of its own, once
// the client's next bytes can be read (or the connection failed, or was
// closed), and returns true; the caller then returns, and its goroutine
// ends. It returns false when the next bytes should be read at once:
// bytes are held (the ones sent with the upgrade request, or after a
// refused header), the connection is closed, or it cannot be parked.
func (c *frameWatch) park(resume func()) bool {
	if !c.parks() || c.heldLeft.Load() || c.tooBig.Load() {
		return false
	}
	p := thePoller
	c.pk.mu.Lock()
	defer c.pk.mu.Unlock()
	if c.pk.closed {
		return false
	}
	var err error
	if cerr := c.sc.Control(func(fd uintptr) { err = p.arm(c, int(fd)) }); cerr != nil || err != nil {
		return false // closed meanwhile, or refused: the read says how
	}
	c.pk.parked = true
	c.pk.resume = resume
	return true
}

// unpark takes the connection out of the poller for good (Close); a parked
// connection has its reader started.
func (c *frameWatch) unpark() {
	if !c.parks() {
		return
	}
	c.pk.mu.Lock()
	c.pk.closed = true
	resume := c.pk.resume
	parked := c.pk.parked
	c.pk.parked, c.pk.resume = false, nil
	if c.pk.added {
		// A descriptor closed already left the epoll set with its socket.
		_ = c.sc.Control(func(fd uintptr) { _ = syscall.EpollCtl(thePoller.epfd, syscall.EPOLL_CTL_DEL, int(fd), nil) })
		thePoller.forget(c, int(c.pk.fd))
		c.pk.added = false
	}
	c.pk.mu.Unlock()
	if parked {
		go resume()
	}
}

// Close implements net.Conn: the library closes the connection through it.
func (c *frameWatch) Close() error {
	c.unpark()
	return c.Conn.Close()
}

// arm puts c, descriptor fd, in the epoll set, or arms it again. It runs
// under c.pk.mu, inside RawConn.Control.
func (p *poller) arm(c *frameWatch, fd int) error {
	if fd < 0 || fd > 1<<30 {
		return errors.New("gateway: descriptor out of range")
	}
	if c.pk.added {
		ev := syscall.EpollEvent{Events: parkEvents, Fd: int32(fd), Pad: int32(c.pk.gen)}
		return syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_MOD, fd, &ev)
	}
	p.mu.Lock()
	p.gen++
	c.pk.gen = p.gen
	if fd >= len(p.conns) {
		grown := make([]*frameWatch, max(fd+1, 2*len(p.conns), 64))
		copy(grown, p.conns)
		p.conns = grown
	}
	p.conns[fd] = c
	p.n++
	if !p.running {
		p.running = true
		go p.run()
	}
	p.mu.Unlock()
	ev := syscall.EpollEvent{Events: parkEvents, Fd: int32(fd), Pad: int32(c.pk.gen)}
	if err := syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		p.forget(c, fd)
		return err
	}
	c.pk.added, c.pk.fd = true, int32(fd)
	return nil
}

// parkEvents: the client's bytes, its end (a FIN: EPOLLRDHUP) and, always
// reported, errors and hang-ups; once, until armed again.
const parkEvents = syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT

// forget drops c from the table, unless another connection has its
// descriptor now. The last one gone wakes run, to end.
func (p *poller) forget(c *frameWatch, fd int) {
	p.mu.Lock()
	if fd < len(p.conns) && p.conns[fd] == c {
		p.conns[fd] = nil
		p.n--
		if p.n == 0 {
			_, _ = syscall.Write(p.wake[1], []byte{0}) // a full pipe will wake it as well
		}
	}
	p.mu.Unlock()
}

// run waits for the parked connections' events and starts their readers,
// until no connection is in the set.
func (p *poller) run() {
	events := make([]syscall.EpollEvent, 256)
	var drain [64]byte
	for {
		n, err := syscall.EpollWait(p.epfd, events, -1)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			// Nothing else is expected of a valid epoll instance and
			// buffer; the parked connections would never be read again.
			panic("gateway: epoll_wait: " + err.Error())
		}
		for i := range events[:n] {
			if fd := int(events[i].Fd); fd == p.wake[0] {
				for {
					if k, _ := syscall.Read(fd, drain[:]); k < len(drain) {
						break
					}
				}
			} else {
				p.fire(fd, uint32(events[i].Pad))
			}
		}
		p.mu.Lock()
		if p.n == 0 {
			p.running = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
}

// fire starts the reader of the connection parked on fd, if it is the
// connection gen names and still parked.
func (p *poller) fire(fd int, gen uint32) {
	p.mu.Lock()
	var c *frameWatch
	if fd >= 0 && fd < len(p.conns) {
		c = p.conns[fd]
	}
	p.mu.Unlock()
	if c == nil {
		return
	}
	c.pk.mu.Lock()
	if c.pk.gen != gen || !c.pk.parked {
		c.pk.mu.Unlock()
		return
	}
	resume := c.pk.resume
	c.pk.parked, c.pk.resume = false, nil
	c.pk.mu.Unlock()
	go resume()
}

// IdleGoroutines is how many goroutines an idle connection over a socket
// holds: none, once parked; its reader where epoll is refused.
func IdleGoroutines() int {
	if getPoller() != nil {
		return 0
	}
	return 1
}
