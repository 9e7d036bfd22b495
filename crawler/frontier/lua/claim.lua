-- Claim up to N URLs (or robots jobs) of one partition for a worker, politely.
--
-- First returns expired leases to their queues (a dead worker's work) and
-- moves due delayed URLs back to their queues. Then takes, one URL at a time,
-- the host with the earliest next-allowed time that is due: pops its queue
-- head, leases it and pushes its site's next-allowed time by the delay (with
-- jitter). A host is in the ready set only while it has queued URLs and its
-- site fewer in flight than its concurrency, so each step is O(log hosts);
-- the other authorities of the site (http and https of one name) are
-- re-scored with it. A host whose registered domain is busy (as many in
-- flight as FRONTIER_DOMAIN_CONCURRENCY, or its next turn not come: the
-- domain delay) waits for the domain outside the ready set, so it holds no
-- download slot and costs nothing until the domain has room (common.lua).
--
-- KEYS[1]  the partition's counts hash
-- ARGV[1]  prefix, ARGV[2] N, ARGV[3] lease ms, ARGV[4] worker id,
-- ARGV[5]  random number in [0, 1) for jitter, ARGV[6] jitter (0..1),
-- ARGV[7]  how many expired leases / due delayed URLs to move at most
-- ARGV[8]  robots: 0 when robots.txt is not obeyed, else how long (ms) one
--          worker may take to fetch a host's robots.txt before another may
-- ARGV[9]  domain concurrency (0: no limit), ARGV[10] domain delay ms (both
--          0: the domain scope is off)
-- ARGV[11] 1 when the IP scope is on, ARGV[12] how long (ms) a host that joins
--          the hosts parked for its address waits at most before it is looked
--          at again (a lost wake's fallback), ARGV[13] how long (ms) a DNS job
--          may take before the host is handed out again, ARGV[14] DNS jobs
--          handed out at most, ARGV[15] 1 when a host's new URLs go before
--          its revisits, ARGV[16] how long (ms) after its claim a worker
--          starts a URL without asking the start gate (start.lua)
-- ARGV[17] how far ahead (ms) a claim reserves a site's next URLs (0: one
--          URL per host and claim), ARGV[18] how many URLs due later than
--          now this claim may reserve at most
-- Returns {now_ms, next_ready_ms or -1, then per claim: host, entry, robots
-- version, then for a URL "SITE_TURN DOMAIN_TURN OFFSET LATEST DELAY FLOOR"
-- (turns 0: none; offset -1: see reservation below; latest: when it must
-- have started, in ms after the claim, or else ask start.lua; the site's
-- delay in force and its floor, in ms, for the worker's own pacing), '' for
-- a job}. A claimed URL has passed the start gate: the claim moved the
-- site's and domain's next start (s) past the window in which its worker
-- starts it, so the worker asks start.lua only when it starts it later than
-- that (its turns then say "nobody started since": it goes at once).
-- A reservation: a host taken here may give several URLs at once, the
-- site's next ones, as many as its (and its domain's) concurrency has room
-- for within reserve_ms of its schedule. The first starts now, each next
-- one OFFSET ms after the claim, spaced by the delay as the claims would
-- have spaced them; the worker keeps them and starts each at its offset,
-- and no later than the least gap before the next one's (LATEST). The site
-- counts them all in flight, so no other worker claims it meanwhile; the
-- site's and domain's next claim and start move past the last one, which
-- alone carries turns: an earlier one started later than LATEST asks
-- start.lua with none, so it waits until the reservation is over. (A
-- serial reservation: see reservation below.)
-- An entry "R" is a robots job: the host's robots.txt is unknown or
-- due, so this worker fetches it (robots.lua stores the result) and the
-- host's URLs wait in the frontier meanwhile, holding no download slot. An
-- entry "W" (third value: the address) is no claim: the host joined the hosts
-- parked here for its server's address, and the caller puts it in the
-- address's queue (ipgate.lua). An entry "D" is no claim either: a DNS job,
-- the IP scope's first look at a site whose server address is not known
-- (or no longer): the caller resolves its name and joins the address
-- (ipjoin.lua, ipnote.lua) before any of its URLs is claimed, so a name on a
-- busy server waits parked instead of being claimed and refused. Neither
-- counts against N.
local p = ARGV[1]
local want, lease_ms, worker = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local rnd, jitter, move_max = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local robots_ms = num(ARGV[8], 0)
local dconc, ddelay = num(ARGV[9], 0), num(ARGV[10], 0)
local ipscope, ip_fallback = ARGV[11] == '1', num(ARGV[12], 0)
local dns_job_ms, dns_job_max = num(ARGV[13], 0), num(ARGV[14], 0)
local start_window = num(ARGV[16], 0)
local reserve_ms, extras = num(ARGV[17], 0), num(ARGV[18], 0)
local dns_jobs = 0
local now = now_ms()
local ready = p .. ':ready'
-- The timed sets' earliest time (common.lua, timer_at): steps 1, 2, 2b, 4
-- and 5 run only when it has come, or when the IP scope was turned off
-- while hosts are parked (step 5 lets them all go); each step only when its
-- own set's time came.
-- (mt:iwake, read with it, says whether hosts are parked: negative when
-- the set was found empty, and every park lowers it to a time.)
local mt = redis.call('HMGET', KEYS[1], 'mt', 'mt:iwake', 'mt:leased')
local timers = num(mt[1], 0)
local maintain = now >= math.abs(timers)
  or (not ipscope and num(mt[2], 0) >= 0 and redis.call('EXISTS', p .. ':iwake') == 1)
local look, own = {}, {}  -- the timed sets to look at, their stored times
if maintain then
  own = redis.call('HMGET', KEYS[1], unpack(TIMER_FIELDS))
  for j, set in ipairs(TIMED_SETS) do look[set] = timer_due(own[j], now) end
  if not ipscope then look.iwake = true end
end


-- 1. Expired leases go back to their queues.
if look.leased then
local expired = redis.call('ZRANGEBYSCORE', p .. ':leased', '-inf', now, 'LIMIT', 0, move_max)
for _, fp in ipairs(expired) do
  local data = redis.call('HGET', p .. ':ld', fp)
  redis.call('ZREM', p .. ':leased', fp)
  redis.call('HDEL', p .. ':ld', fp)
  if data then
    local host, score, _, entry = split_fields(data, 4)  -- host, score, worker, entry
    local sk = site_key(p, host)
    hincr(sk, 'i', -1)
    domain_lease_ended(p, sk, fp, now)
    push_url(p, host, score, entry)
    refresh_site(p, host)
  end
end
if #expired > 0 then
  hincr(KEYS[1], 'leased', -#expired)
  hincr(KEYS[1], 'queued', #expired)
  hincr(KEYS[1], 'expired', #expired)
end

end
-- 2. Due delayed URLs go back to their queues.
if look.delayed then
local due = redis.call('ZRANGEBYSCORE', p .. ':delayed', '-inf', now, 'LIMIT', 0, move_max)
for _, fp in ipairs(due) do
  local data = redis.call('HGET', p .. ':dd', fp)
  redis.call('ZREM', p .. ':delayed', fp)
  redis.call('HDEL', p .. ':dd', fp)
  if data then
    local host, score, entry = split_fields(data, 3)
    push_url(p, host, score, entry)
  end
end
if #due > 0 then
  hincr(KEYS[1], 'delayed', -#due)
  hincr(KEYS[1], 'queued', #due)
end

end
-- 2b. Done URLs whose revisit is due go back to their hosts' queues
-- (FRONTIER_REVISIT_AFTER): PP:vdue holds the hosts with revisits by the
-- earliest one's ms, PP:v:HOST the host's done URLs by when each is due, in
-- seconds (release.lua). Behind
-- the host's new URLs when ARGV[15] is 1 (their priority lowered by 2^16),
-- else in their own priority's order; either way first come, first served.
if look.vdue then
local revisit_back = num(ARGV[15], 1) == 1 and 65536 * 4294967296 or 0
local vhosts = redis.call('ZRANGEBYSCORE', p .. ':vdue', '-inf', now, 'LIMIT', 0, move_max)
-- A dropped or parked host's revisits become dead letters, as its new links
-- do (admit.lua): requeueing the host brings them back.
local revisited, revisits_dead = 0, 0
local seq = nil
local vbudget = move_max
for _, host in ipairs(vhosts) do
  if vbudget <= 0 then break end
  local vk = p .. ':v:' .. host
  local entries = redis.call('ZRANGEBYSCORE', vk, '-inf', math.floor(now / 1000), 'LIMIT', 0, vbudget)
  if #entries == 0 then  -- due times in ms: kept by a build before 2026-12-03
    entries = redis.call('ZRANGEBYSCORE', vk, '(100000000000', now, 'LIMIT', 0, vbudget)
  end
  vbudget = vbudget - #entries
  local b = redis.call('HGET', p .. ':h:' .. host, 'b')
  local reason = b == 'p' and redis.call('HGET', p .. ':h:' .. host, 'pr')
    or '{"reason": "dropped", "error": "host dropped before its revisit"}'
  seq = seq or num(redis.call('HGET', KEYS[1], 'seq'), 0)
  for _, entry in ipairs(entries) do
    redis.call('ZREM', vk, entry)
    if b == '1' or b == 'p' then
      redis.call('HSET', p .. ':dead', string.sub(entry, 1, 16), host .. '\n' .. reason .. '\n' .. entry)
      revisits_dead = revisits_dead + 1
    else
      seq = seq + 1
      -- (records.py writes the priority "p" right after the depth "d")
      local prio = num(string.match(entry, ',"d":%d+,"p":(-?%d+)', 17), 0)
      push_url(p, host, queue_score(prio, seq) + revisit_back, entry)
      revisited = revisited + 1
    end
  end
  local first = redis.call('ZRANGE', vk, 0, 0, 'WITHSCORES')
  if #first == 0 then
    redis.call('ZREM', p .. ':vdue', host)
  else
    local due = tonumber(first[2])
    redis.call('ZADD', p .. ':vdue', due > 100000000000 and due or due * 1000, host)
  end
end
if revisited + revisits_dead > 0 then
  redis.call('HSET', KEYS[1], 'seq', seq)
  hincr(KEYS[1], 'revisit', -(revisited + revisits_dead))
  hincr(KEYS[1], 'done', -(revisited + revisits_dead))
  hincr(KEYS[1], 'queued', revisited)
  hincr(KEYS[1], 'dead', revisits_dead)
  hincr(KEYS[1], 'revisited', revisited)
end
end  -- step 2b

-- 3. Claim: the helpers, the domains to wake, then one URL at a time.
local out = {}
local got, leased = 0, 0
local jit_n = 0  -- claims so far, spreading the jitter of one call

-- A jittered gap around delay_ms, never below floor.
local function jittered(delay_ms, floor)
  local r = (rnd + jit_n * 0.6180339887) % 1
  jit_n = jit_n + 1
  return math.max(floor, math.floor(delay_ms * (1 - jitter + 2 * jitter * r)))
end

-- A domain's concurrency and delay in force (an operator's override, else
-- the settings) and whether it is paused.
-- (st: the fields as read, including rh, the site of its last lease, re,
-- when that site's reservation ends, and m: another site of the domain
-- claimed since, so one URL per claim.)
local function domain_limits(dom)
  local st = redis.call('HMGET', p .. ':d:' .. dom, 't', 'xc', 'xd', 'xp', 's', 'rh', 'm', 're')
  return math.max(num(st[1], 0), num(st[5], 0)), tonumber(st[2] or dconc),
         delay_in_force(ddelay, st[3]), st[4] ~= false, st
end

-- The least gap between two starts on a gate whose delay is delay_ms: the
-- delay less its jitter, plus the window in which a claimed URL starts
-- (0: nothing to space).
local function start_gap(delay)
  local least = math.floor(delay * (1 - jitter))
  return least > 0 and start_window + least or 0
end

-- The start turn a claimed URL (off ms after now) takes on a gate (the
-- site's or the domain's hash): its worker starts it within start_window ms
-- of its offset, so no other start comes before the delay less its jitter
-- after that. A robots Crawl-delay (floor) counts from the end of the answer
-- instead (it allows one request at a time, and release.lua moves s on from
-- the end), so it needs no window. Returns the gate's next start (0: nothing
-- to space).
local function start_turn(floor, delay, off)
  local s = math.max(floor, start_gap(delay))
  return s > 0 and now + off + s or 0
end

-- The fields of a host's site record (PP:g:NAME) and of the host record
-- (PP:h:HOST) that a claim reads, each read once per host taken.
-- (READY_SITE and na among them: the step places the host in the ready set
-- without reading them again, refresh_site_known.)
local SITE = {'ip', 'ipx', 'd', 'dl', 'fl', 'bs', 'xd', 'i', 'c', 'xc', 'ad', 'lt', 't', 'w',
              'rj', 'xp', 'dj', 's', 'na', 'd1'}
local HOST = {'rs', 'rx', 'iwk', 'rv', 'n', 'rw'}

-- The domain of a host just taken from the ready set, the domain's delay
-- and how many more leases the host may take (1 once the domain's sites
-- take turns), or false if its domain is busy: then the host waits for the
-- domain (dw) instead. nil: no domain gate. Fourth: the domain's room when
-- its sites take turns (a domain reservation may use it), else nil.
-- A domain is a reservation's only while one site of it claims: its turns
-- then follow that site's. The first claim of another site waits until the
-- reservation under way ends, and from then on the domain's sites take
-- turns, one URL per claim.
local function domain_turn(host, dom)
  if not dom then return nil end
  local t, conc, delay, paused, st = domain_limits(dom)
  if conc == 0 and delay == 0 and not paused then return nil end
  if st[6] and st[6] ~= site_of(host) then
    t = math.max(t, num(st[8], 0))
    if not st[7] then
      redis.call('HSET', p .. ':d:' .. dom, 'm', 1)
      st[7] = '1'
    end
  end
  local in_flight = conc > 0 and domain_in_flight(p, dom, now) or 0
  local full = paused or (conc > 0 and in_flight >= conc)
  if not full and now >= t then
    local room = conc > 0 and conc - in_flight or math.huge
    return dom, delay, st[7] and 1 or room, st[7] and room
  end
  -- Paced: look again at its turn. Full: the end of a lease wakes it, and so
  -- does this (a no-op while it stays full), in case the scope is off then.
  queue_for_domain(p, host, dom, redis.call('ZSCORE', ready, host), t)
  return false
end

-- A domain's waiting hosts are looked at when its next turn comes: a wake
-- set sooner (step 4's fallback, an earlier turn of this claim) would only
-- find it busy, so the wake moves to that turn, later (and the timers are
-- stored again after the claims: mt only ever comes sooner otherwise).
local moved_wakes = false
local function move_wake(dom, at)
  if redis.call('EXISTS', p .. ':dw:' .. dom) == 0 then return end
  redis.call('ZADD', p .. ':dwake', at, dom)
  moved_wakes = true
end

-- Leases of the domain (di: expiry, member pairs; a member is a
-- fingerprint, or "R" .. host for a robots job) by host's site, the one
-- with turns off ms from now and the reservation over at until; the
-- domain's next claim is a jittered domain delay after off, and a URL's
-- start turn (start) moves its next start too, to that next claim at the
-- soonest: nobody else starts a URL of the domain before it, so the URL
-- that carries the turn may start up to the least gap before it on its
-- worker's word (lease_head). Returns that turn (0: none) and the domain's
-- next turn (its next claim or start, the later).
local function domain_took(dom, di, delay, start, off, until_ms, host)
  redis.call('ZADD', p .. ':di:' .. dom, unpack(di))
  local t = now + off + jittered(delay, 0)
  local turn = start and start_turn(0, delay, off) or 0
  if turn > 0 then turn = math.max(turn, t) end
  hset_fields(p .. ':d:' .. dom, {t = t, s = turn > 0 and turn or nil, rh = site_of(host),
                                  re = until_ms + start_gap(delay)})
  move_wake(dom, math.max(t, turn))
  return turn, math.max(t, turn)
end

-- Does this host need its robots.txt fetched before any page? (unknown,
-- expired, unreachable past its retry time, or a fetch whose worker vanished)
local function robots_due(h)
  if robots_ms == 0 then return false end
  return h.rs ~= 'k' or now >= num(h.rx, 0)
end

-- The offsets (ms from now) of the URLs one claim of a host reserves: the
-- first now, the others spaced as successive claims would space them (the
-- site's jittered delay, never below its floor, the domain's, and the least
-- gap between starts), as many as the site's and the domain's room (droom)
-- allow, its queue holds, fit in reserve_ms and the claim may still take.
-- A site that takes one request at a time (a Crawl-delay, adaptive pacing,
-- a concurrency of 1) is paced from the end of each answer, which no claim
-- can know: its next URLs get the offset -1, "after the one before ended",
-- and the worker starts each the site's delay after the start of the one
-- before and its floor (or adaptive delay) after its end; as many as about
-- reserve_ms of its answers and delays hold (lt: its answers' mean time),
-- SERIAL_MAX at most. g and h: the site's and host's records as read for
-- this step.
local SERIAL_MAX = 16
local function reservation(g, h, delay, floor, dom, ddelay, droom)
  local offs = {0}
  if reserve_ms <= 0 or g.bs == 'o' or g.bs == 'h' then return offs end
  local conc = site_concurrency(g.c, g.xc, g.fl, g.dl, g.ad)
  if conc == 1 then
    if num(g.i, 0) > 0 then return offs end
    local cycle = num(g.lt, 0) + math.max(delay, floor, num(g.ad, 0))
    local k = math.min(num(h.n, 0), extras + 1, SERIAL_MAX, droom or math.huge,
                       cycle > 0 and math.floor(reserve_ms / cycle) + 1 or SERIAL_MAX)
    for j = 2, k do offs[j] = -1 end
    extras = extras - math.max(k - 1, 0)
    return offs
  end
  local k = math.min(conc - num(g.i, 0), droom or math.huge, num(h.n, 0))
  local least = math.max(start_gap(delay), dom and start_gap(ddelay) or 0)
  local off = 0
  while #offs < k do
    local step = math.max(jittered(delay, floor), dom and jittered(ddelay, 0) or 0, least)
    if off + step > reserve_ms then break end
    if step > 0 then
      if extras <= 0 then break end
      extras = extras - 1
    elseif got + #offs >= want then
      break
    end
    off = off + step
    offs[#offs + 1] = off
  end
  return offs
end

-- Lease the head of the host's queue (a reservation: its next URLs, or the
-- offsets forced) and move the site's next-allowed time on past the last by
-- its delay (with jitter, never below its floor fl: a robots Crawl-delay). g
-- and h: the site's and host's records as read for this step; turns: its
-- domain's sites take turns, so the host waits for the domain's next turn
-- (refresh_site_known). Returns how many start now, and the domain's next
-- turn (nil: no domain gate, or nothing leased).
local function lease_head(host, hk, sk, g, h, dom, ddelay, droom, forced, turns)
  local delay, floor = delay_in_force(g.dl, g.xd), num(g.fl, 0)
  local offs = forced or reservation(g, h, delay, floor, dom, ddelay, droom)
  local popped = redis.call('ZPOPMIN', p .. ':q:' .. host, #offs)
  if #popped == 0 then
    redis.call('HSET', hk, 'n', 0)  -- repair: a host without a queue is not ready
    redis.call('ZREM', ready, host)
    return 0
  end
  if h.iwk then redis.call('HDEL', hk, 'iwk') end  -- its place at the address is taken now
  local k = #popped / 2
  -- the URL that carries the turns: the last one spaced by offsets, or the
  -- first of a serial reservation (the others are paced by its worker); the
  -- domain is held for the whole reservation
  local serial = offs[k] < 0
  local carrier, last = serial and 1 or k, serial and reserve_ms or offs[k]
  local leases, data = {}, {}
  for j = 1, k do
    local entry, score = popped[2 * j - 1], popped[2 * j]
    local fp = string.sub(entry, 1, 16)
    local expiry = now + math.max(offs[j], 0) + lease_ms
    leases[2 * j - 1], leases[2 * j] = expiry, fp
    data[2 * j - 1], data[2 * j] = fp, host .. '\n' .. score .. '\n' .. worker .. '\n' .. entry
  end
  redis.call('ZADD', p .. ':leased', unpack(leases))
  redis.call('HSET', p .. ':ld', unpack(data))
  -- The site's next claim; its next start is no sooner (a paced site's
  -- carrier may then start up to the least gap before it, see latest below).
  local next_claim = now + offs[carrier] + jittered(delay, floor)
  local turn = start_turn(floor, delay, offs[carrier])
  if turn > 0 and floor == 0 then turn = math.max(turn, next_claim) end
  local w = {i = num(g.i, 0) + k, t = next_claim, s = turn > 0 and turn or nil}
  if g.bs == 'o' or g.bs == 'h' then
    -- Breaker cool-down over: this URL is the one probe (half-open); the
    -- site is held until its release says how it went (or the lease ends).
    w.bs, w.w = 'h', now + lease_ms
  end
  hset_fields(sk, w)
  redis.call('HSET', hk, 'n', num(h.n, 0) - k)
  local dturn, domain_at = 0, nil
  if dom then
    dturn, domain_at = domain_took(dom, leases, ddelay, true, offs[carrier], now + last, host)
  end
  refresh_site_known(p, host, as_written(g, w), num(h.n, 0) - k, h.rw, domain_at,
                     turns and dom or nil)
  -- The latest a URL may start without asking start.lua: the least gap
  -- before the next one's offset for all but the last (0: a serial
  -- reservation's, paced by its worker); for the last (or only) one, the
  -- least gap before the site's and the domain's next start (nobody else
  -- starts there sooner), and never before the window has passed.
  local site_least = math.floor(delay * (1 - jitter))
  local dom_least = dom and math.floor(ddelay * (1 - jitter)) or 0
  local least = math.max(site_least, floor, dom_least)
  local starts = 0
  for j = 1, k do
    local latest = offs[j] + start_window
    if serial then
      latest = j == 1 and start_window or 0
    elseif j < k then
      latest = offs[j + 1] - least
    elseif turn > 0 and floor == 0 then
      local by = turn - now - site_least
      if dturn > 0 then by = math.min(by, dturn - now - dom_least) end
      latest = math.max(latest, by)
    end
    out[#out + 1] = host
    out[#out + 1] = popped[2 * j - 1]
    out[#out + 1] = h.rv or '0'
    -- (only the last carries the turns: see the header)
    out[#out + 1] = (j == carrier and (turn .. ' ' .. dturn) or '0 0') .. ' ' .. offs[j]
      .. ' ' .. latest .. ' ' .. delay .. ' ' .. floor
    if offs[j] == 0 then starts = starts + 1 end
  end
  leased = leased + k
  return starts, domain_at
end

-- 4. Domains whose waiting hosts may go now: as many as the domain has room
-- for (one per turn when it has a delay) go back to the ready set
-- (refresh_host: if their sites have room too). While hosts still wait, the
-- domain is looked at again: when its next turn comes (domain_took), when one
-- of its leases ends (domain_lease_ended), or after a delay at the latest,
-- so a woken host that cannot go after all never strands the others. A full
-- domain is looked at again when its first lease in flight runs out at the
-- latest: a lease whose end is never reported (a robots job given up, its
-- worker gone) must not strand the hosts waiting for it. A paused domain is
-- woken by its resume (control.lua).
if look.dwake then
local wakes = redis.call('ZRANGEBYSCORE', p .. ':dwake', '-inf', now, 'LIMIT', 0, move_max)
for _, dom in ipairs(wakes) do
  redis.call('ZREM', p .. ':dwake', dom)
  local t, conc, delay, paused = domain_limits(dom)
  local room = move_max
  if conc > 0 then room = conc - domain_in_flight(p, dom, now, true) end
  if delay > 0 then room = math.min(room, 1) end
  if paused then
    -- the resume wakes it
  elseif now < t then
    wake_domain(p, dom, t)
  elseif room > 0 then
    local woken = redis.call('ZPOPMIN', p .. ':dw:' .. dom, room)
    for j = 1, #woken, 2 do refresh_host(p, woken[j]) end
    wake_domain(p, dom, now + math.max(delay, 50))
  else
    local first = redis.call('ZRANGE', p .. ':di:' .. dom, 0, 0, 'WITHSCORES')
    wake_domain(p, dom, #first > 0 and tonumber(first[2]) or now + 50)
  end
end

end
-- 5. Hosts parked for their server's address whose time came (ipwake.lua
-- wakes them sooner, when the address has room): their site's address is
-- looked at again (a DNS job, below), which lets them go if their turn at
-- the address has come and keeps them parked, in their place, if not: a
-- wake time is a fallback, not a turn. With the IP scope off (a setting
-- changed), every parked host comes back at once.
if look.iwake then
local iwakes = redis.call('ZRANGEBYSCORE', p .. ':iwake', '-inf', ipscope and now or '+inf',
                         'LIMIT', 0, move_max)
for _, addr in ipairs(iwakes) do
  local parked = p .. ':iw:' .. addr
  local due
  if ipscope then
    due = redis.call('ZRANGEBYSCORE', parked, '-inf', now, 'LIMIT', 0, move_max)
  else
    due = redis.call('ZRANGE', parked, 0, move_max - 1)
  end
  for _, host in ipairs(due) do
    redis.call('ZREM', parked, host)
    if ipscope then redis.call('HSET', site_key(p, host), 'ipx', 0) end
    refresh_host(p, host)
  end
  local first = redis.call('ZRANGE', parked, 0, 0, 'WITHSCORES')
  if #first == 0 then
    redis.call('ZREM', p .. ':iwake', addr)
  else
    redis.call('ZADD', p .. ':iwake', math.max(tonumber(first[2]), now + 1), addr)
  end
end

end  -- step 5

-- The timed sets' earliest times, stored for the claims to come: the sets
-- in fresh are read afresh, the others are as stored (the TIMER_FIELDS
-- values as read). A set found empty stores the negative of a time a
-- minute away (timer_at). Returns the soonest (mt).
local function store_timers(fresh, stored)
  local fields = {}
  local soonest, empty = nil, now + 60000
  for j, set in ipairs(TIMED_SETS) do
    local at
    if fresh[set] then
      local first = redis.call('ZRANGE', p .. ':' .. set, 0, 0, 'WITHSCORES')
      at = #first > 0 and tonumber(first[2]) or -empty
      fields[#fields + 1] = TIMER_FIELDS[j]
      fields[#fields + 1] = at
    else
      at = num(stored[j], 0)
    end
    if at > 0 then
      soonest = math.min(soonest or math.huge, at)
    else
      empty = math.min(empty, -at)
    end
  end
  fields[#fields + 1] = 'mt'
  fields[#fields + 1] = soonest or -empty
  redis.call('HSET', KEYS[1], unpack(fields))
  return soonest or -empty
end

-- Again, now that the sets were looked at (the claim below lowers them when
-- it leases or wakes a domain).
if maintain then timers = store_timers(look, own) end

-- Does the host's server address have hosts parked here? Then it joins them
-- (unless it was just woken), rather than be claimed, refused at the
-- address's gate and given back, holding a download slot meanwhile. A host
-- whose address is not known gets a DNS job instead.
local function joins_ip_waiters(host, sk, g, h)
  if not ipscope then return false end
  if not g.ip or now >= num(g.ipx, 0) then
    -- Its server's address is not known (any more): a DNS job first (the
    -- host is out of the ready set until it is done, or its time runs out).
    dns_jobs = dns_jobs + 1
    redis.call('HSET', sk, 'dj', now + dns_job_ms)
    refresh_site(p, host)
    out[#out + 1] = host
    out[#out + 1] = 'D'
    out[#out + 1] = ''
    out[#out + 1] = ''
    return true
  end
  if g.ip == '-' then return false end  -- no address to gate (a proxy, a failed lookup)
  -- Woken for a place at the address (ipwake.lua, ipnote.lua): it goes, and
  -- keeps the mark until it is handed out (a busy domain may send it to wait
  -- first: the place is still its own when the domain lets it go).
  if h.iwk then return false end
  local parked = p .. ':iw:' .. g.ip
  if redis.call('EXISTS', parked) == 0 then return false end
  if redis.call('ZSCORE', parked, host) then
    redis.call('ZREM', ready, host)  -- parked already, and queued at the address
    return true
  end
  park_for_ip(p, host, g.ip, now + jittered(ip_fallback, ip_fallback))
  out[#out + 1] = host
  out[#out + 1] = 'W'
  out[#out + 1] = g.ip
  out[#out + 1] = ''
  return true
end

-- A domain whose sites take turns (m) reserves its turns too: after the
-- claim's URL, the next URLs of the hosts waiting for the domain (dw), one
-- each, in their order, each at the domain's next turn as the one before
-- left it (a jittered domain delay, never less than the least gap between
-- starts, after it: where the next claim would be), as many as fit in
-- reserve_ms, the domain's concurrency has room for (room) and the claim may
-- still take; not the host the claim just took (taken_host: the others
-- waited longer). A waiting host goes only if its own site would let it go by
-- then and a claim would hand it a URL (no robots.txt due, no breaker probe,
-- its server's address known and nobody parked there); the others keep
-- waiting for the domain's wake. Each takes its turn at its site and at the
-- domain as a claim of it then would (lease_head with that offset).
local function domain_reservation(dom, ddelay, room, taken_host, next_turn)
  if reserve_ms <= 0 or not room or room < 2 then return end
  local dw = p .. ':dw:' .. dom
  local waiting = {}
  for _, host in ipairs(redis.call('ZRANGE', dw, 0, math.min(room - 1, extras, SERIAL_MAX) + 3)) do
    if host ~= taken_host then waiting[#waiting + 1] = host end
  end
  local off = 0
  local taken = 1
  for _, host in ipairs(waiting) do
    if taken >= room or extras <= 0 then return end
    -- the domain's next turn as the lease before left it
    local step = next_turn and next_turn - now - off or 0
    if step <= 0 or off + step > reserve_ms then return end
    local hk, sk = p .. ':h:' .. host, site_key(p, host)
    local g, h = record(sk, SITE), record(hk, HOST)
    local at = ready_at(h.n, h.rw, g)
    local clear = at and at <= now + off + step and not robots_due(h)
      and g.bs ~= 'o' and g.bs ~= 'h'
      and (not ipscope or g.ip == '-' or (g.ip and now < num(g.ipx, 0)
        and redis.call('EXISTS', p .. ':iw:' .. g.ip) == 0))
    if clear then
      off = off + step
      redis.call('ZREM', dw, host)
      extras = extras - 1
      taken = taken + 1
      local _, turn_after = lease_head(host, hk, sk, g, h, dom, ddelay, 1, {off}, true)
      next_turn = turn_after
    end
  end
end

-- (A claim hands out at most dns_job_max DNS jobs, so that looking up a
-- thousand new names is spread over claims, not one long script.)
-- (The head read with its score: when it is not due, that score is also
-- when the next thing here is due (step 6), and the loop's one read.)
local head_at = nil
while got < want and dns_jobs < dns_job_max do
  local h = redis.call('ZRANGE', ready, 0, 0, 'WITHSCORES')
  if #h == 0 or tonumber(h[2]) > now then
    head_at = #h > 0 and tonumber(h[2]) or -1
    break
  end
  local host = h[1]
  local hk, sk = p .. ':h:' .. host, site_key(p, host)
  local g, h = record(sk, SITE), record(hk, HOST)
  -- The ready set's score is where the host stood when last placed; its
  -- site's record is the truth. A start since (start.lua moves the site's
  -- next start on without placing its hosts again) or any change not yet
  -- placed: the host is placed where it stands now, and not claimed early.
  local at = ready_at(h.n, h.rw, g)
  local dom, dom_delay, droom, dturns = false, nil, nil, nil
  if not at or at > now then
    place_host(p, host, at)
  else
    -- The domain first: a host whose domain is busy waits for it without
    -- queueing at its server's address (where it would hold a place it
    -- cannot use while the domain keeps it waiting).
    -- (a site alone in its domain is gated by its own turns only:
    -- alone_in_domain in common.lua)
    local gated = g.d and not alone_in_domain(g, dconc, ddelay)
    dom, dom_delay, droom, dturns = domain_turn(host, gated and g.d or nil)
    if dom ~= false and joins_ip_waiters(host, sk, g, h) then dom = false end
  end
  if dom == false then
    -- not its turn yet, or waits for its domain or its server's address
  elseif robots_due(h) then
    if num(g.i, 0) > 0 then
      -- A robots.txt fetch is a request to the server like any other: it
      -- waits until nothing of the name is in flight (the release re-scores
      -- the host).
      redis.call('ZREM', ready, host)
    else
      -- This worker fetches it (robots.lua stores the outcome; the fetch
      -- passes the start gate first); the site's URLs wait here meanwhile,
      -- holding no download slot.
      redis.call('HSET', hk, 'rs', 'f', 'rw', now + robots_ms)
      if h.iwk then redis.call('HDEL', hk, 'iwk') end
      redis.call('HSET', sk, 'rj', now + robots_ms)
      if dom then
        domain_took(dom, {now + robots_ms, 'R' .. host}, dom_delay, false, 0, now, host)
      end
      refresh_site(p, host)
      out[#out + 1] = host
      out[#out + 1] = 'R'
      out[#out + 1] = '0'
      out[#out + 1] = ''
      got = got + 1
    end
  else
    local started, domain_at = lease_head(host, hk, sk, g, h, dom, dom_delay, droom, nil,
                                          dturns and true or false)
    got = got + started
    if dturns then domain_reservation(dom, dom_delay, dturns, host, domain_at) end
  end
end
if leased > 0 then
  hincr(KEYS[1], 'leased', leased)
  hincr(KEYS[1], 'queued', -leased)
  -- (Unless the timers read at the start, untouched since, are due sooner
  -- already: the usual case, leases all lasting as long.)
  local expiry, leased_at = now + lease_ms, num(mt[3], 0)
  if maintain or not (timers > 0 and timers <= expiry and leased_at > 0 and leased_at <= expiry) then
    timer_at(p, expiry, 'leased')
  end
end
if moved_wakes then
  timers = store_timers({dwake = true}, redis.call('HMGET', KEYS[1], unpack(TIMER_FIELDS)))
end

-- 6. When is the next thing due here? (ready host, delayed URL, lease
-- expiry, a domain or an address's parked hosts to look at, a revisit).
-- Not asked when this claim got all it wanted: the worker claims again as
-- soon as it has room, whatever is due.
local next_ms = -1
if got < want then
  if head_at then
    next_ms = head_at
  else
    local first = redis.call('ZRANGE', ready, 0, 0, 'WITHSCORES')
    if #first > 0 then next_ms = tonumber(first[2]) end
  end
  if timers_lowered then timers = num(redis.call('HGET', KEYS[1], 'mt'), 0) end
  if timers > 0 and (next_ms < 0 or timers < next_ms) then next_ms = timers end
end

local result = {now, next_ms}
for _, v in ipairs(out) do result[#result + 1] = v end
return result
