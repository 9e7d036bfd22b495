-- May a request to this host start now? The last gate before the download.
--
-- Claims are spaced by the host's delay, but a claimed URL can wait in a
-- worker (a busy reactor, a middleware) before it is sent, and two workers'
-- waits differ. This gate spaces the actual starts, for all workers, by the
-- smallest gap the delay allows: delay x (1 - jitter), and never less than
-- the host's floor fl (a robots.txt Crawl-delay, which jitter must not cut).
-- A backoff hold bk (Retry-After, a 429 / 503, a breaker cooling down) set
-- after the URL was claimed keeps it from starting too. (Not w: that also
-- holds a host while its robots.txt or a breaker probe is in flight, which
-- must not stop the probe itself.)
--
-- KEYS[1]  the site hash (PP:g:NAME: every scheme and port of a name share
--          it); ARGV[1] jitter (0..1)
-- Returns 0 (start now; the gate is moved on) or the ms to wait.
local now = now_ms()
local st = redis.call('HMGET', KEYS[1], 's', 'dl', 'fl', 'bk')
local gate, delay = tonumber(st[1] or '0') or 0, tonumber(st[2] or '0') or 0
gate = math.max(gate, tonumber(st[4] or '0') or 0)
if now < gate then return gate - now end
local gap = math.max(tonumber(st[3] or '0') or 0, math.floor(delay * (1 - tonumber(ARGV[1]))))
redis.call('HSET', KEYS[1], 's', now + gap)
return 0
