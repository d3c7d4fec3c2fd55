//! A NUMA node's DRAM as a server of fixed capacity per time bucket, for requests that
//! arrive out of time order.
//!
//! The engine advances one thread a page (64 lines) at a time, so a node's requests reach
//! it out of time order by up to a page's duration. A plain FCFS server
//! (`start = max(now, busy_until)`) makes a request that is earlier in simulated time wait
//! for every later request already served: two threads reading one node then serialise
//! page by page although the node has bandwidth to spare.
//!
//! Here time is cut into buckets of [`LINES_PER_BUCKET`] service times. A request takes a
//! place in the bucket of its own time when that bucket has room, so it waits for nothing;
//! otherwise it joins the end of the backlog (the first bucket with room at or after the
//! last overflow) and waits until that bucket starts. Below the node's bandwidth nothing
//! waits; above it the backlog grows as in a FCFS queue, so throughput is capped at one
//! line per service time (give or take one bucket of burst).

/// Lines one bucket holds: the burst served without waiting.
pub const LINES_PER_BUCKET: u32 = 8;
/// Buckets remembered; requests older than the ring are served without waiting.
const RING: usize = 16384;
const _: () = assert!(RING.is_power_of_two());

/// One node's DRAM queue.
#[derive(Debug, Clone)]
pub struct DramQueue {
    /// Bucket length in cycles.
    width: f64,
    /// Absolute bucket index held by each ring slot.
    base: Vec<i64>,
    /// Lines taken in each ring slot's bucket.
    used: Vec<u32>,
    /// First bucket that may have room after the backlog (the last overflow's bucket).
    tail: i64,
    /// The last request's time and its bucket: a run of requests at one time (a raw
    /// trace, where time stands still) divides once.
    last_now: f64,
    last_bucket: i64,
}

impl DramQueue {
    /// A queue serving one line per `service` cycles (0 = no queueing).
    pub fn new(service: f64) -> Self {
        let on = service > 0.0;
        DramQueue {
            width: service * LINES_PER_BUCKET as f64,
            base: if on { vec![-1; RING] } else { Vec::new() },
            used: if on { vec![0; RING] } else { Vec::new() },
            tail: 0,
            last_now: f64::NAN,
            last_bucket: 0,
        }
    }

    /// Forget every reservation.
    pub fn clear(&mut self) {
        self.base.iter_mut().for_each(|b| *b = -1);
        self.used.iter_mut().for_each(|u| *u = 0);
        self.tail = 0;
    }

    /// Take a place for one line requested at `now`; returns the cycles it waits.
    #[inline]
    pub fn request(&mut self, now: f64) -> f64 {
        // no ring: no queueing (service <= 0)
        if self.used.is_empty() {
            return 0.0;
        }
        // (a NaN `last_now` equals nothing)
        if now != self.last_now {
            self.last_now = now;
            self.last_bucket = (now / self.width) as i64;
        }
        let b0 = self.last_bucket;
        match self.take(b0) {
            Some(true) => return 0.0,
            None => return 0.0, // older than the ring: long past, no queue left
            Some(false) => {}
        }
        let mut b = (b0 + 1).max(self.tail);
        while self.take(b) == Some(false) {
            b += 1;
        }
        self.tail = b;
        let start = b as f64 * self.width;
        if start > now {
            start - now
        } else {
            0.0
        }
    }

    /// Take a place in bucket `b`: Some(true) if taken, Some(false) if full, None if `b` is
    /// older than the ring.
    #[inline(always)]
    fn take(&mut self, b: i64) -> Option<bool> {
        let slot = b.rem_euclid(RING as i64) as usize;
        debug_assert!(self.base.len() == RING && self.used.len() == RING);
        // SAFETY: `slot` < RING, the length of both rings (`request` returns before this
        // when they are empty).
        let (base, used) = unsafe {
            (
                self.base.get_unchecked_mut(slot),
                self.used.get_unchecked_mut(slot),
            )
        };
        if *base != b {
            if *base > b {
                return None;
            }
            *base = b;
            *used = 0;
        }
        if *used < LINES_PER_BUCKET {
            *used += 1;
            Some(true)
        } else {
            Some(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_requests_are_capped_at_one_line_per_service_time() {
        let mut q = DramQueue::new(10.0);
        let mut t = 0.0;
        for _ in 0..10_000 {
            t += q.request(t) + 1.0; // wants a line per cycle
        }
        assert!(t >= 10_000.0 * 10.0 * 0.99, "t = {t}");
        assert!(t <= 10_000.0 * 10.0 * 1.01 + 100.0, "t = {t}");
    }

    #[test]
    fn an_earlier_request_does_not_wait_for_later_ones_below_capacity() {
        let mut q = DramQueue::new(10.0);
        // a thread ahead in time takes one line every 40 cycles up to t = 4000
        for i in 0..100 {
            assert_eq!(q.request(i as f64 * 40.0), 0.0);
        }
        // a thread behind it, also one line per 40 cycles: room in every bucket
        for i in 0..100 {
            assert_eq!(q.request(i as f64 * 40.0 + 5.0), 0.0);
        }
    }

    #[test]
    fn zero_service_never_waits() {
        let mut q = DramQueue::new(0.0);
        assert_eq!(q.request(5.0), 0.0);
        assert_eq!(q.request(1.0), 0.0);
    }
}
