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
-- Steps 1 to 2b are in claim_back.lua, step 3's helpers in claim_turns.lua,
-- steps 4 and 5 in claim_wake.lua (store.py puts them in at their
-- --#include lines).
--
-- KEYS[1]  the partition's counts hash
-- ARGV[1]  prefix, ARGV[2] worker id
-- ARGV[3]  the claim, a JSON object by name (scriptargs.claim_args): want,
--          how many URLs to claim (N); rnd, a random number in [0, 1) for
--          jitter; start_window_ms, how long after its claim a worker starts
--          a URL without asking the start gate (start.lua); later, how many
--          URLs due later than now this claim may reserve at most (0: one URL
--          per host and claim)
-- ARGV[4]  the crawl's limits, a JSON object by name (scriptargs.claim_limits,
--          one text for a round's calls to every partition): lease_ms; jitter (0..1); move_max, how many expired leases / due
--          delayed URLs to move at most; robots_ms, 0 when robots.txt is not
--          obeyed, else how long one worker may take to fetch a host's
--          robots.txt before another may; domain_concurrency (0: no limit)
--          and domain_delay_ms (both 0: the domain scope is off); ip_scope
--          (true: on); ip_fallback_ms, how long a host that joins the hosts
--          parked for its address waits at most before it is looked at again
--          (a lost wake's fallback); dns_job_ms, how long a DNS job may take
--          before the host is handed out again; dns_job_max, DNS jobs handed
--          out at most; revisit_new_first (true: a host's new URLs go before
--          its revisits); reserve_ms, how far ahead a claim reserves a site's
--          next URLs (0: one URL per host and claim); budget, the
--          BUDGET_* settings (host_pages, host_bytes, host_ms, domain_pages,
--          domain_bytes, domain_ms; 0: off); inlinks (true: queued URLs are
--          raised by their inlinks, admit.lua)
-- Returns {now_ms, next_ready_ms or -1, then per claim: host, entry, robots
-- version, then for a URL "SITE_TURN DOMAIN_TURN OFFSET LATEST DELAY FLOOR SCORE"
-- (turns 0: none; offset -1: see reservation below; latest: when it must
-- have started, in ms after the claim, or else ask start.lua; the site's
-- delay in force and its floor, in ms, for the worker's own pacing; the
-- queue score it had, which names its lease with the rest: lease_fields in
-- common.lua), '' for a job}. A claimed URL has passed the start gate: the claim moved the
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
-- busy server waits parked instead of being claimed and refused. An entry
-- "B" (third value: "site|domain pages|bytes|seconds LIMIT") is a budget
-- job: the host's site, or its domain, spent a budget (claim_turns.lua
-- budget_room), so its worker ends the site's queue (drop_host.lua). None of
-- them counts against N.
local p, worker = ARGV[1], ARGV[2]
local a, limits = cjson.decode(ARGV[3]), cjson.decode(ARGV[4])
local want, rnd = a.want, a.rnd
local start_window, extras = num(a.start_window_ms, 0), num(a.later, 0)
local lease_ms, jitter, move_max = limits.lease_ms, limits.jitter, limits.move_max
local robots_ms = num(limits.robots_ms, 0)
local dconc, ddelay = num(limits.domain_concurrency, 0), num(limits.domain_delay_ms, 0)
local ipscope, ip_fallback = limits.ip_scope == true, num(limits.ip_fallback_ms, 0)
local dns_job_ms, dns_job_max = num(limits.dns_job_ms, 0), num(limits.dns_job_max, 0)
local revisit_new_first = limits.revisit_new_first ~= false
local reserve_ms = extras > 0 and num(limits.reserve_ms, 0) or 0
local dns_jobs = 0
local now = now_ms()
local ready = p .. ':ready'
-- The timed sets' earliest time (common.lua, timer_at): steps 1, 2, 2b, 4
-- and 5 run only when it has come, or when the IP scope was turned off
-- while hosts are parked (step 5 lets them all go); each step only when its
-- own set's time came.
-- (mt:iwake, read with it, says whether hosts are parked: negative when
-- the set was found empty, and every park lowers it to a time.)
local mt = redis.call('HMGET', KEYS[1], N.timers, N.timer_iwake, N.timer_leased, N.leased,
                      N.queued, N.sleepers)
local timers = num(mt[1], 0)
local maintain = now >= math.abs(timers)
  or (not ipscope and num(mt[2], 0) >= 0 and redis.call('EXISTS', p .. ':iwake') == 1)
local look, own = {}, {}  -- the timed sets to look at, their stored times
-- URLs the steps moved into (+) or out of (-) the leased and queued counts
local moved = {leased = 0, queued = 0}
if maintain then
  own = redis.call('HMGET', KEYS[1], unpack(TIMER_FIELDS))
  for j, set in ipairs(TIMED_SETS) do look[set] = timer_due(own[j], now) end
  if not ipscope then look.iwake = true end
end


--#include claim_back

--#include claim_turns

--#include claim_wake

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
  if not g[S.address] or now >= num(g[S.address_until], 0) then
    -- Its server's address is not known (any more): a DNS job first (the
    -- host is out of the ready set until it is done, or its time runs out).
    dns_jobs = dns_jobs + 1
    redis.call('HSET', sk, S.dns_job, now + dns_job_ms)
    refresh_site(p, host)
    out[#out + 1] = host
    out[#out + 1] = 'D'
    out[#out + 1] = ''
    out[#out + 1] = ''
    return true
  end
  if g[S.address] == '-' then return false end  -- no address to gate (a proxy, a failed lookup)
  -- Woken for a place at the address (ipwake.lua, ipnote.lua): it goes, and
  -- keeps the mark until it is handed out (a busy domain may send it to wait
  -- first: the place is still its own when the domain lets it go).
  if h[H.woken] then return false end
  if not ip_has_parked(p, g[S.address]) then return false end
  local parked = p .. ':iw:' .. g[S.address]
  if redis.call('ZSCORE', parked, host) then
    ready_moved[host] = false
    redis.call('ZREM', ready, host)  -- parked already, and queued at the address
    return true
  end
  park_for_ip(p, host, g[S.address], now + jittered(ip_fallback, ip_fallback))
  out[#out + 1] = host
  out[#out + 1] = 'W'
  out[#out + 1] = g[S.address]
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
  dom_batch = {dom = dom, di = {}, fields = {}}
  for _, host in ipairs(waiting) do
    if taken >= room or extras <= 0 then break end
    -- the domain's next turn as the lease before left it
    local step = next_turn and next_turn - now - off or 0
    if step <= 0 or off + step > reserve_ms then break end
    local hk, sk = p .. ':h:' .. host, site_key(p, host)
    local g, h = record(sk, SITE), record(hk, HOST)
    local at = ready_at(h[H.queued], h[H.robots_wait], g)
    local clear = at and at <= now + off + step and not robots_due(h)
      and g[S.breaker] ~= 'o' and g[S.breaker] ~= 'h' and not budget_room(g)
      and (not ipscope or g[S.address] == '-' or (g[S.address]
        and now < num(g[S.address_until], 0) and not ip_has_parked(p, g[S.address])))
    if clear then
      off = off + step
      extras = extras - 1
      taken = taken + 1
      -- (it stays in the waiting set, at its new score, if it waits for the
      -- domain again: queue_for_domain)
      from_dw = host
      local _, turn_after = lease_head(host, hk, sk, g, h, dom, ddelay, 1, {off}, true)
      if from_dw == host then
        redis.call('ZREM', dw, host)
        dw_filled[dom] = nil
      end
      from_dw = nil
      next_turn = turn_after
    end
  end
  local batch = dom_batch
  dom_batch = nil
  if #batch.di > 0 then redis.call('ZADD', p .. ':di:' .. dom, unpack(batch.di)) end
  hset_fields(p .. ':d:' .. dom, batch.fields)
  if batch.wake then move_wake(dom, batch.wake) end
end

-- (A claim hands out at most dns_job_max DNS jobs, so that looking up a
-- thousand new names is spread over claims, not one long script.)
-- The ready set's head is read a few hosts at a time: a host this script
-- placed or took out since (ready_moved, common.lua) is skipped, the others
-- stand where the read found them. The first one not due ends the loop
-- unless a host placed since is due (then the set is read afresh); the
-- head's score is then the sooner of the two, and no host is returned.
-- (The head read with its score: when it is not due, that score is also
-- when the next thing here is due (step 6).)
local heads, at_head, heads_all = {}, 1, false
local function moved_first()  -- the soonest a moved host was placed at
  local soonest = nil
  for _, at in pairs(ready_moved) do
    if at and (not soonest or at < soonest) then soonest = at end
  end
  return soonest
end
local function ready_head()
  while true do
    if at_head <= #heads then
      local host, score = heads[at_head], tonumber(heads[at_head + 1])
      if ready_moved[host] ~= nil then
        at_head = at_head + 2
      elseif score <= now then
        at_head = at_head + 2
        return host, score
      else
        -- (not taken: still the head when asked again)
        local first = moved_first()
        if not first or first > now then return nil, math.min(score, first or score) end
        heads, at_head, heads_all = {}, 1, false  -- a host placed since is due
      end
    else
      if heads_all then  -- the read held the whole set: the moved hosts are the rest
        local first = moved_first()
        if not first or first > now then return nil, first end
      end
      local n = math.min(want - got, 30) + 2
      heads = redis.call('ZRANGE', ready, 0, n - 1, 'WITHSCORES')
      at_head, ready_moved, heads_all = 1, {}, #heads < 2 * n
      if #heads == 0 then return nil end
    end
  end
end
-- A domain's turn that its host did not take (it went for a DNS job, or to
-- wait for its server's address) goes to the next host waiting for the
-- domain, in this claim: a turn wasted so would leave the domain a turn
-- behind for every new host (at most PASS_MAX a claim).
local PASS_MAX, passed = 8, 0
local function pass_turn(dom)
  if passed >= PASS_MAX then return end
  passed = passed + 1
  local woken = redis.call('ZPOPMIN', p .. ':dw:' .. dom, 1)
  if #woken == 0 then return end
  dw_filled[dom] = nil
  refresh_host(p, woken[1])
end

local head_at = nil
while got < want and dns_jobs < dns_job_max do
  local host, score = ready_head()
  if not host then
    head_at = score or -1
    break
  end
  local hk, sk = p .. ':h:' .. host, site_key(p, host)
  local g, h = record(sk, SITE), record(hk, HOST)
  -- The ready set's score is where the host stood when last placed; its
  -- site's record is the truth. A start since (start.lua moves the site's
  -- next start on without placing its hosts again) or any change not yet
  -- placed: the host is placed where it stands now, and not claimed early.
  local at = ready_at(h[H.queued], h[H.robots_wait], g)
  local dom, dom_delay, droom, dturns = false, nil, nil, nil
  local spent, limit, whose = nil, nil, nil
  if at and at <= now then spent, limit, whose = budget_room(g) end
  if not at or at > now then
    place_host(p, host, at)
  elseif spent and num(g[S.in_flight], 0) > 0 then
    -- Its URLs in flight may yet come back unstarted (a page budget would
    -- then have room again): the job waits for their releases, which place
    -- the host again.
    place_host(p, host, nil)
  elseif spent then
    -- (no turn taken: ending a queue costs its server nothing)
    budget_job(host, sk, spent, limit, whose)
  else
    -- The domain first: a host whose domain is busy waits for it without
    -- queueing at its server's address (where it would hold a place it
    -- cannot use while the domain keeps it waiting).
    -- (a site alone in its domain is gated by its own turns only:
    -- alone_in_domain in common.lua)
    local gated = g[S.domain] and not alone_in_domain(g, dconc, ddelay)
    dom, dom_delay, droom, dturns = domain_turn(host, gated and g[S.domain] or nil,
                                                  h[H.woken] ~= nil)
    if dom ~= false and joins_ip_waiters(host, sk, g, h) then
      if dom then pass_turn(dom) end
      dom = false
    end
  end
  if dom == false then
    -- not its turn yet, or waits for its domain or its server's address
  elseif robots_due(h) then
    if num(g[S.in_flight], 0) > 0 then
      -- A robots.txt fetch is a request to the server like any other: it
      -- waits until nothing of the name is in flight (the release re-scores
      -- the host).
      ready_moved[host] = false
      redis.call('ZREM', ready, host)
    else
      -- This worker fetches it (robots.lua stores the outcome; the fetch
      -- passes the start gate first); the site's URLs wait here meanwhile,
      -- holding no download slot.
      redis.call('HSET', hk, H.robots_state, 'f', H.robots_wait, now + robots_ms)
      if h[H.woken] then redis.call('HDEL', hk, H.woken) end
      redis.call('HSET', sk, S.robots_job, now + robots_ms)
      if dom then
        domain_took(dom, {now + robots_ms, 'R' .. host}, dom_delay, false, 0, now, host)
      end
      -- (a site of one authority placed from what this step holds)
      refresh_site_known(p, host, as_written(g, {[S.robots_job] = now + robots_ms}), h[H.queued],
                         now + robots_ms)
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
for j = 1, #lease_members, 1000 do
  redis.call('ZADD', p .. ':leased', unpack(lease_members, j, math.min(j + 999, #lease_members)))
end
-- The partition's counts of URLs leased and queued, from those read at the
-- start and what the steps moved (one write, whatever they did).
if leased > 0 or moved.leased ~= 0 or moved.queued ~= 0 then
  redis.call('HSET', KEYS[1], N.leased, num(mt[4], 0) + leased + moved.leased,
             N.queued, num(mt[5], 0) - leased + moved.queued)
end
if leased > 0 then
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
-- Asked also when this claim got all it wanted (then usually from the head
-- read already): the worker asks this partition again only when that time
-- comes, not at once because it gave all it was asked.
if not head_at then
  local _, score = ready_head()
  head_at = score or -1
end
local next_ms = head_at
if timers_lowered then timers = num(redis.call('HGET', KEYS[1], N.timers), 0) end
if timers > 0 and (next_ms < 0 or timers < next_ms) then next_ms = timers end

-- A claim that got less than it asked, or nothing more due now, leaves its
-- worker waiting for next_ms: a script that makes something due sooner
-- tells it (common.lua, wake_sleepers).
local waits_for = next_ms < 0 and SLEEP_FOREVER or next_ms
if not (got >= want and next_ms >= 0 and next_ms <= now) and waits_for > num(mt[6], 0) then
  redis.call('HSET', KEYS[1], N.sleepers, waits_for)
end

local result = {now, next_ms}
for _, v in ipairs(out) do result[#result + 1] = v end
return result
