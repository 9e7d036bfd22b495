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
-- ARGV[1]  prefix, ARGV[2] learn_min, ARGV[3] max_fields, ARGV[4] alike
--          pages, ARGV[5] alike share (percent), ARGV[6] sketch distance
-- ARGV[7..] per host: host, n, then n observations of 3 values (op, a, b),
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
local p = ARGV[1]
local learn_min, max_fields = tonumber(ARGV[2]), tonumber(ARGV[3])
local alike_pages, alike_share = tonumber(ARGV[4]), tonumber(ARGV[5])
local max_distance = tonumber(ARGV[6])
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

local function learn_host(host, items)
  local fk = p .. ':k:' .. host
  -- What every page of the batch may read, read once: rules, refused
  -- patterns, fetched spellings, the canonical links' state and how many
  -- w: fields wait (wn; missing, from a build that did not count them:
  -- look each time).
  -- With them, each page's d:KEY and each pattern's t:PATTERN (read here
  -- once; written with the rest at the end: fields).
  local names = {'r', 'x', 'f', 'cu', 'cm', 'wn', 'nf'}
  local at = {}  -- field -> its place in the answer
  for _, it in ipairs(items) do
    local field = (it[1] == 'D' and 'd:' .. it[2]) or (it[1] == 'T' and 't:' .. it[2]) or nil
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
  local room_was = nf and room
  local refused, fetched_s, cm_s = head[2] or '', head[3] or '', head[5]
  local unreliable = head[4] == '1'
  local waiting = room == max_fields and 0 or tonumber(head[6])
  local waiting_was = waiting
  local touched = {}
  local patterns = {}  -- t:PATTERN as read and changed here, written at the end

  local function set_new(field, value)
    if room > 0 and redis.call('HSETNX', fk, field, value) == 1 then
      room = room - 1
      return true
    end
    return false
  end
  local function incr(field)
    if room > 0 or redis.call('HEXISTS', fk, field) == 1 then
      if hincr(fk, field, 1) == 1 then room = room - 1 end
    end
  end
  local function agree(param) incr('m:' .. param); touched[param] = true end
  local function against(param) incr('k:' .. param); touched[param] = true end
  local function compare(param, mine, theirs)
    if mine == theirs then agree(param) else against(param) end
  end

  -- Another page named by a canonical link: three pages naming one make
  -- the host's canonical links unreliable (cu).
  local function canonical(rel, arg)
    if rel ~= 'o' then return end
    local target, page = string.match(arg, '^(%S+) (%S+)$')
    local cm = words(cm_s)
    if #cm == 0 then
      cm_s = target .. ' ' .. page
      redis.call('HSET', fk, 'cm', cm_s)
    elseif cm[1] == target and #cm < 4 and not has(cm, page) then
      cm[#cm + 1] = page
      cm_s = table.concat(cm, ' ')
      redis.call('HSET', fk, 'cm', cm_s)
      if #cm == 4 and not unreliable then
        unreliable = true
        redis.call('HSET', fk, 'cu', 1)
        for _, param in ipairs(words(head[1])) do touched[param] = true end
      end
    end
  end

  local function dropped(param, base)
    touched[param] = true
    local field = 'n:' .. param
    local bases = words(redis.call('HGET', fk, field))
    if #bases < keep_bases and not has(bases, base) then
      bases[#bases + 1] = base
      if #bases == 1 then set_new(field, base) else redis.call('HSET', fk, field, table.concat(bases, ' ')) end
    end
  end

  local function variant(param, arg)
    local base, digest = string.match(arg, '^(%S+) (%S+)$')
    local field = 'd:' .. base
    local known = fields[field] or stored[field]
    if known == nil then known = redis.call('HGET', fk, field) end
    if known then compare(param, digest, known); return end
    -- BASE not fetched yet: kept for when it is (digest_of)
    local first = words(redis.call('HGET', fk, 'w:' .. base))
    if #first == 0 then
      if set_new('w:' .. base, param .. ' ' .. digest) and waiting then waiting = waiting + 1 end
    elseif first[1] == param then
      -- two values of P: two different pages, or one page whatever P says
      compare(param, digest, first[2])
    end
  end

  -- Whether the page is new (its first fetch): only then does it teach.
  local function digest_of(key, digest)
    local field = 'd:' .. key
    if stored[field] or fields[field] then
      fields[field] = digest
      return false
    end
    if room > 0 then
      fields[field] = digest
      room = room - 1
    end
    if waiting == 0 then return true end
    local first = words(redis.call('HGET', fk, 'w:' .. key))
    if #first == 2 then
      compare(first[1], first[2], digest)
      redis.call('HDEL', fk, 'w:' .. key)
      room = room + 1
      if waiting then waiting = waiting - 1 end
    end
    return true
  end

  -- A pattern's pages and sketches, from this call's copy or the hash.
  local function pattern_state(pattern)
    local state = patterns[pattern]
    if state == nil then
      local got = words(stored['t:' .. pattern] or nil)
      state = {stored = #got > 0, pages = num(got[1], 0), alike = num(got[2], 0), sketches = {}}
      for i = 3, #got do state.sketches[#state.sketches + 1] = got[i] end
      patterns[pattern] = state
    end
    return state
  end

  local function trap(pattern, sketch)
    if string.find('\n' .. refused .. '\n', '\n' .. pattern .. '\n', 1, true) then return end
    local state = pattern_state(pattern)
    if not state.stored and not state.dirty and room <= 0 then return end
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
      refused = refused == '' and pattern or refused .. '\n' .. pattern
      redis.call('HSET', fk, 'x', refused)
      if state.stored then redis.call('HDEL', fk, 't:' .. pattern) end
      if state.stored or state.dirty then room = room + 1 end
      patterns[pattern] = {trapped = true}
      news[#news + 1] = host; news[#news + 1] = 'trap'
      news[#news + 1] = pattern
      news[#news + 1] = state.alike .. ' of ' .. state.pages .. ' pages alike'
      return
    end
    if not state.stored and not state.dirty then room = room - 1 end
    state.dirty = true
  end

  local new_page = true
  for _, it in ipairs(items) do
    local op, a, b = it[1], it[2], it[3]
    if op == 'D' then new_page = digest_of(a, b)
    elseif not new_page then  -- a page fetched before: nothing new
    elseif op == 'C' then canonical(a, b)
    elseif op == 'N' then dropped(a, b)
    elseif op == 'K' then against(a)
    elseif op == 'V' then variant(a, b)
    elseif op == 'T' then trap(a, b)
    end
  end

  local pairs_out = {}
  for field, value in pairs(fields) do
    pairs_out[#pairs_out + 1] = field
    pairs_out[#pairs_out + 1] = value
  end
  for pattern, state in pairs(patterns) do
    if state.dirty then
      pairs_out[#pairs_out + 1] = 't:' .. pattern
      pairs_out[#pairs_out + 1] = state.pages .. ' ' .. state.alike .. ' '
        .. table.concat(state.sketches, ' ')
    end
  end
  if room ~= room_was then
    pairs_out[#pairs_out + 1] = 'nf'
    pairs_out[#pairs_out + 1] = max_fields - room
  end
  if waiting and waiting ~= waiting_was or (waiting == 0 and not head[6]) then
    pairs_out[#pairs_out + 1] = 'wn'
    pairs_out[#pairs_out + 1] = waiting
  end
  if #pairs_out > 0 then redis.call('HSET', fk, unpack(pairs_out)) end

  -- The pages that taught P by their canonical link were fetched with P:
  -- their identity without it, if never fetched itself, is fetched all the
  -- same (f, at most 256), so a queued link to it is not one more request.
  local function remember_fetched(param)
    local fetched = words(fetched_s)
    for _, base in ipairs(words(redis.call('HGET', fk, 'n:' .. param))) do
      if #fetched < 256 and redis.call('HEXISTS', fk, 'd:' .. base) == 0
          and not has(fetched, base) then
        fetched[#fetched + 1] = base
      end
    end
    if #fetched > 0 then
      fetched_s = table.concat(fetched, ' ')
      redis.call('HSET', fk, 'f', fetched_s)
    end
  end

  -- Decide for every parameter the pages spoke of: noise once learn_min
  -- observations agree, one of them a payload equal to the page's without
  -- P (a canonical link is the site's word, a payload is the page: a site
  -- that names page 1 the canonical of page 2 would otherwise lose page 2),
  -- and nothing says otherwise.
  local rules = words(head[1])
  local changed = false
  for param, _ in pairs(touched) do
    local against_n = num(redis.call('HGET', fk, 'k:' .. param), 0)
    local same = num(redis.call('HGET', fk, 'm:' .. param), 0)
    local bases = unreliable and 0 or #words(redis.call('HGET', fk, 'n:' .. param))
    local noise = against_n == 0 and same + bases >= learn_min
      and same > 0
    local known = has(rules, param)
    if noise and known then
      remember_fetched(param)  -- pages in flight when it was learned taught it since
    elseif noise and not known then
      rules[#rules + 1] = param
      changed = true
      remember_fetched(param)
      news[#news + 1] = host; news[#news + 1] = 'learned'; news[#news + 1] = param
      news[#news + 1] = bases .. ' canonical link(s), ' .. same .. ' identical payload(s)'
    elseif known and not noise then
      local kept = {}
      for _, r in ipairs(rules) do if r ~= param then kept[#kept + 1] = r end end
      rules = kept
      changed = true
      redis.call('HDEL', fk, 'f')  -- whatever the rules covered may be fetched again
      fetched_s = ''
      news[#news + 1] = host; news[#news + 1] = 'withdrawn'; news[#news + 1] = param
      news[#news + 1] = against_n > 0 and 'evidence that it matters' or 'canonical links unreliable'
    end
  end
  if changed then table.sort(rules) end
  local r = table.concat(rules, ' ')
  if changed then redis.call('HSET', fk, 'r', r) end
  current[#current + 1] = host
  current[#current + 1] = r
  current[#current + 1] = refused
  current[#current + 1] = fetched_s
end

local i = 7
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
    if news[j] == 'learned' then learned = learned + 1 elseif news[j] == 'trap' then traps = traps + 1 end
  end
  if learned > 0 then hincr(KEYS[1], 'rules', learned) end
  if traps > 0 then hincr(KEYS[1], 'traps', traps) end
end
return {news, current}
