-- What the pages of a host say about its URLs: weigh the evidence, learn a
-- host's noise parameters and refuse its trap patterns (crawler/learning/).
--
-- Everything a host has taught lives in PP:k:HOST (a hash), shared by every
-- worker and kept across restarts:
--   r          the noise parameters learned (space-separated)
--   x          the URL patterns refused as traps (one per line)
--   f          identities fetched only as a spelling with a noise parameter
--              (their keys): a link to one is not fetched again
--   cm         "TARGET KEY...": the first other page named, and the pages
--              (up to three) that named it;
--   cu         1 once three pages named one other page: the host's canonical
--              links all point to one page, and say nothing about parameters
--   n:P        the pages whose canonical link dropped P (their keys, at most
--              keep_bases of them); m:P pages whose payload equals the page
--              without P; k:P evidence that P matters (a canonical link that
--              keeps it, a payload that differs): any blocks the rule
--   d:KEY      a fetched page's payload digest; w:KEY "P DIGEST": the first
--              page fetched at KEY plus P, to compare with KEY when it comes, or
--              with KEY plus another value of P (the same payload agrees)
--   wn         how many w: fields there are (so a new page looks for its
--              w: only when some wait)
--   nf         how many fields the hash holds, as this script counts them
--              (the evidence fields it adds and removes: the bound's count,
--              kept so that no call needs HLEN)
--   t:PATTERN  "PAGES ALIKE SKETCH..." the pages of a pattern, how many of
--              them were near-duplicates of an earlier one, the last sketches
-- New evidence fields stop at max_fields per host (a hostile host cannot
-- grow it without bound); r and x always fit.
--
-- KEYS[1]  the partition's counts hash (routes the call to the partition)
-- ARGV[1]  prefix
-- ARGV[2]  the rest, a JSON object by name (scriptargs.learn_args): learn_min,
--          max_fields, alike_pages, alike_share (percent), max_distance (the
--          sketches')
-- ARGV[3..] per host (as many hosts and observations as the batch holds:
-- positional): host, n, then n observations of 3 values (op, a, b),
-- each page's starting with its D:
--   D key digest   the page's own key and payload digest. A page fetched
--                  before (its d:KEY is there: a revisit, a new crawl on the
--                  same frontier) says nothing new: its other ops are skipped
--   C rel "TARGET KEY"  the page's canonical link: s (itself), d (itself
--                  without parameters), o (another page: TARGET its key)
--   N P base       its canonical link dropped P (base: the page's key without P)
--   K P -          its canonical link kept P
--   V P "BASE DIGEST"  the page is BASE plus P, and its payload digest
--   T pattern sketch  the page's URL pattern and text sketch
-- Returns {news, rules}: news, 4 values each: host, "learned" | "withdrawn" |
-- "trap", the parameter or pattern, a detail for the log; and each host's
-- rules as they stand now, 4 values each: host, r, x, f (so that every worker
-- crawling a host has its rules within a batch, whoever learned them).
local p, args = ARGV[1], cjson.decode(ARGV[2])
local learn_min, max_fields = args.learn_min, args.max_fields
local alike_pages, alike_share = args.alike_pages, args.alike_share
local max_distance = args.max_distance
-- The pages fetched with a parameter whose canonical link dropped it, kept
-- until a payload confirms the rule: each one's identity counts as fetched
-- once it does (f), so none of them costs a second request.
local keep_bases = math.max(learn_min, 8)
local news, current = {}, {}

local function words(s)
  local out = {}
  for w in string.gmatch(s or '', '%S+') do out[#out + 1] = w end
  return out
end

local function has(list, value)
  for _, v in ipairs(list) do if v == value then return true end end
  return false
end

-- Bits that differ between two 64-bit sketches (16 hex characters).
local function distance(a, b)
  local n = 0
  for i = 1, 9, 8 do
    local x = bit.bxor(tonumber(string.sub(a, i, i + 7), 16), tonumber(string.sub(b, i, i + 7), 16))
    while x ~= 0 do
      x = bit.band(x, x - 1)
      n = n + 1
    end
  end
  return n
end

-- A host's state while this call learns from its items (st, which the
-- functions below read and change), from its record PP:k:HOST.
local function read_host(host, items)
  local fk = p .. ':k:' .. host
  -- What every page of the batch may read, read once: rules, refused
  -- patterns, fetched spellings, the canonical links' state and how many
  -- w: fields wait (wn; missing, from a build that did not count them:
  -- look each time).
  -- With them, each page's d:KEY and each pattern's t:PATTERN (read here
  -- once; written with the rest at the end: fields).
  local names = {K.noise, K.traps, K.fetched, K.canonical_one, K.canonical_many, K.waits, K.size}
  local at = {}  -- field -> its place in the answer
  for _, it in ipairs(items) do
    local field = (it[1] == 'D' and K.digest .. it[2])
      or (it[1] == 'T' and K.pattern .. it[2]) or nil
    if field and not at[field] then
      names[#names + 1] = field
      at[field] = #names
    end
  end
  local head = redis.call('HMGET', fk, unpack(names))
  local stored = {}  -- field -> value as read (false: missing)
  for field, j in pairs(at) do stored[field] = head[j] or false end
  local fields = {}  -- field -> value to write at the end
  -- How many fields the host has (nf, kept here; a record without it is
  -- counted once): the evidence fields' room.
  local nf = tonumber(head[7])
  local room = max_fields - (nf or redis.call('HLEN', fk))
  local waiting = room == max_fields and 0 or tonumber(head[6])
  -- (patterns: t:PATTERN as read and changed here, written at the end)
  return {host = host, fk = fk, head = head, stored = stored, fields = fields,
          room = room, room_was = nf and room, refused = head[2] or '',
          fetched_s = head[3] or '', cm_s = head[5], unreliable = head[4] == '1',
          waiting = waiting, waiting_was = waiting, touched = {}, patterns = {}}
end

local function set_new(st, field, value)
  if st.room > 0 and redis.call('HSETNX', st.fk, field, value) == 1 then
    st.room = st.room - 1
    return true
  end
  return false
end
local function incr(st, field)
  if st.room > 0 or redis.call('HEXISTS', st.fk, field) == 1 then
    if hincr(st.fk, field, 1) == 1 then st.room = st.room - 1 end
  end
end
local function agree(st, param) incr(st, K.same .. param); st.touched[param] = true end
local function against(st, param) incr(st, K.kept .. param); st.touched[param] = true end
local function compare(st, param, mine, theirs)
  if mine == theirs then agree(st, param) else against(st, param) end
end

-- Another page named by a canonical link: three pages naming one make
-- the host's canonical links unreliable (cu).
local function canonical(st, rel, arg)
  if rel ~= 'o' then return end
  local target, page = string.match(arg, '^(%S+) (%S+)$')
  local cm = words(st.cm_s)
  if #cm == 0 then
    st.cm_s = target .. ' ' .. page
    redis.call('HSET', st.fk, K.canonical_many, st.cm_s)
  elseif cm[1] == target and #cm < 4 and not has(cm, page) then
    cm[#cm + 1] = page
    st.cm_s = table.concat(cm, ' ')
    redis.call('HSET', st.fk, K.canonical_many, st.cm_s)
    if #cm == 4 and not st.unreliable then
      st.unreliable = true
      redis.call('HSET', st.fk, K.canonical_one, 1)
      for _, param in ipairs(words(st.head[1])) do st.touched[param] = true end
    end
  end
end

local function dropped(st, param, base)
  st.touched[param] = true
  local field = K.dropped .. param
  local bases = words(redis.call('HGET', st.fk, field))
  if #bases < keep_bases and not has(bases, base) then
    bases[#bases + 1] = base
    if #bases == 1 then
      set_new(st, field, base)
    else
      redis.call('HSET', st.fk, field, table.concat(bases, ' '))
    end
  end
end

local function variant(st, param, arg)
  local base, digest = string.match(arg, '^(%S+) (%S+)$')
  local field = K.digest .. base
  local known = st.fields[field] or st.stored[field]
  if known == nil then known = redis.call('HGET', st.fk, field) end
  if known then compare(st, param, digest, known); return end
  -- BASE not fetched yet: kept for when it is (digest_of)
  local first = words(redis.call('HGET', st.fk, K.waiting .. base))
  if #first == 0 then
    if set_new(st, K.waiting .. base, param .. ' ' .. digest) and st.waiting then
      st.waiting = st.waiting + 1
    end
  elseif first[1] == param then
    -- two values of P: two different pages, or one page whatever P says
    compare(st, param, digest, first[2])
  end
end

-- Whether the page is new (its first fetch): only then does it teach.
local function digest_of(st, key, digest)
  local field = K.digest .. key
  if st.stored[field] or st.fields[field] then
    st.fields[field] = digest
    return false
  end
  if st.room > 0 then
    st.fields[field] = digest
    st.room = st.room - 1
  end
  if st.waiting == 0 then return true end
  local first = words(redis.call('HGET', st.fk, K.waiting .. key))
  if #first == 2 then
    compare(st, first[1], first[2], digest)
    redis.call('HDEL', st.fk, K.waiting .. key)
    st.room = st.room + 1
    if st.waiting then st.waiting = st.waiting - 1 end
  end
  return true
end

-- A pattern's pages and sketches, from this call's copy or the hash.
local function pattern_state(st, pattern)
  local state = st.patterns[pattern]
  if state == nil then
    local got = words(st.stored[K.pattern .. pattern] or nil)
    state = {stored = #got > 0, pages = num(got[1], 0), alike = num(got[2], 0), sketches = {}}
    for i = 3, #got do state.sketches[#state.sketches + 1] = got[i] end
    st.patterns[pattern] = state
  end
  return state
end

local function trap(st, pattern, sketch)
  if string.find('\n' .. st.refused .. '\n', '\n' .. pattern .. '\n', 1, true) then return end
  local state = pattern_state(st, pattern)
  if not state.stored and not state.dirty and st.room <= 0 then return end
  state.pages = state.pages + 1
  local near = false
  for _, s in ipairs(state.sketches) do
    if distance(s, sketch) <= max_distance then near = true; break end
  end
  if near then
    state.alike = state.alike + 1
  else
    state.sketches[#state.sketches + 1] = sketch
    if #state.sketches > 8 then table.remove(state.sketches, 1) end
  end
  if state.alike >= alike_pages and state.alike * 100 >= alike_share * state.pages then
    st.refused = st.refused == '' and pattern or st.refused .. '\n' .. pattern
    redis.call('HSET', st.fk, K.traps, st.refused)
    if state.stored then redis.call('HDEL', st.fk, K.pattern .. pattern) end
    if state.stored or state.dirty then st.room = st.room + 1 end
    st.patterns[pattern] = {trapped = true}
    news[#news + 1] = st.host; news[#news + 1] = 'trap'
    news[#news + 1] = pattern
    news[#news + 1] = state.alike .. ' of ' .. state.pages .. ' pages alike'
    return
  end
  if not state.stored and not state.dirty then st.room = st.room - 1 end
  state.dirty = true
end

-- Each page's observations, in the order they came.
local function observe(st, items)
  local new_page = true
  for _, it in ipairs(items) do
    local op, a, b = it[1], it[2], it[3]
    if op == 'D' then new_page = digest_of(st, a, b)
    elseif not new_page then  -- a page fetched before: nothing new
    elseif op == 'C' then canonical(st, a, b)
    elseif op == 'N' then dropped(st, a, b)
    elseif op == 'K' then against(st, a)
    elseif op == 'V' then variant(st, a, b)
    elseif op == 'T' then trap(st, a, b)
    end
  end
end

-- The fields gathered (digests, patterns, the counts nf and wn), in one HSET.
local function write_back(st)
  local pairs_out = {}
  for field, value in pairs(st.fields) do
    pairs_out[#pairs_out + 1] = field
    pairs_out[#pairs_out + 1] = value
  end
  for pattern, state in pairs(st.patterns) do
    if state.dirty then
      pairs_out[#pairs_out + 1] = K.pattern .. pattern
      pairs_out[#pairs_out + 1] = state.pages .. ' ' .. state.alike .. ' '
        .. table.concat(state.sketches, ' ')
    end
  end
  if st.room ~= st.room_was then
    pairs_out[#pairs_out + 1] = K.size
    pairs_out[#pairs_out + 1] = max_fields - st.room
  end
  if st.waiting and st.waiting ~= st.waiting_was or (st.waiting == 0 and not st.head[6]) then
    pairs_out[#pairs_out + 1] = K.waits
    pairs_out[#pairs_out + 1] = st.waiting
  end
  if #pairs_out > 0 then redis.call('HSET', st.fk, unpack(pairs_out)) end
end

-- The pages that taught P by their canonical link were fetched with P:
-- their identity without it, if never fetched itself, is fetched all the
-- same (f, at most 256), so a queued link to it is not one more request.
local function remember_fetched(st, param)
  local fetched = words(st.fetched_s)
  for _, base in ipairs(words(redis.call('HGET', st.fk, K.dropped .. param))) do
    if #fetched < 256 and redis.call('HEXISTS', st.fk, K.digest .. base) == 0
        and not has(fetched, base) then
      fetched[#fetched + 1] = base
    end
  end
  if #fetched > 0 then
    st.fetched_s = table.concat(fetched, ' ')
    redis.call('HSET', st.fk, K.fetched, st.fetched_s)
  end
end

-- Decide for every parameter the pages spoke of: noise once learn_min
-- observations agree, one of them a payload equal to the page's without
-- P (a canonical link is the site's word, a payload is the page: a site
-- that names page 1 the canonical of page 2 would otherwise lose page 2),
-- and nothing says otherwise. The host's rules as they stand go to current.
local function decide(st)
  local rules = words(st.head[1])
  local changed = false
  for param, _ in pairs(st.touched) do
    local against_n = num(redis.call('HGET', st.fk, K.kept .. param), 0)
    local same = num(redis.call('HGET', st.fk, K.same .. param), 0)
    local bases = st.unreliable and 0
      or #words(redis.call('HGET', st.fk, K.dropped .. param))
    local noise = against_n == 0 and same + bases >= learn_min
      and same > 0
    local known = has(rules, param)
    if noise and known then
      remember_fetched(st, param)  -- pages in flight when it was learned taught it since
    elseif noise and not known then
      rules[#rules + 1] = param
      changed = true
      remember_fetched(st, param)
      news[#news + 1] = st.host; news[#news + 1] = 'learned'; news[#news + 1] = param
      news[#news + 1] = bases .. ' canonical link(s), ' .. same .. ' identical payload(s)'
    elseif known and not noise then
      local kept = {}
      for _, r in ipairs(rules) do if r ~= param then kept[#kept + 1] = r end end
      rules = kept
      changed = true
      redis.call('HDEL', st.fk, K.fetched)  -- whatever the rules covered may be fetched again
      st.fetched_s = ''
      news[#news + 1] = st.host; news[#news + 1] = 'withdrawn'; news[#news + 1] = param
      news[#news + 1] = against_n > 0 and 'evidence that it matters'
        or 'canonical links unreliable'
    end
  end
  if changed then table.sort(rules) end
  local r = table.concat(rules, ' ')
  if changed then redis.call('HSET', st.fk, K.noise, r) end
  current[#current + 1] = st.host
  current[#current + 1] = r
  current[#current + 1] = st.refused
  current[#current + 1] = st.fetched_s
end

local function learn_host(host, items)
  local st = read_host(host, items)
  observe(st, items)
  write_back(st)
  decide(st)
end

local i = 3
while i <= #ARGV do
  local host, n = ARGV[i], tonumber(ARGV[i + 1])
  local items = {}
  for j = 0, n - 1 do
    local at = i + 2 + j * 3
    items[#items + 1] = {ARGV[at], ARGV[at + 1], ARGV[at + 2]}
  end
  learn_host(host, items)
  i = i + 2 + n * 3
end
if #news > 0 then
  local learned, traps = 0, 0
  for j = 2, #news, 4 do
    if news[j] == 'learned' then
      learned = learned + 1
    elseif news[j] == 'trap' then
      traps = traps + 1
    end
  end
  if learned > 0 then hincr(KEYS[1], N.rules, learned) end
  if traps > 0 then hincr(KEYS[1], N.traps, traps) end
end
return {news, current}
