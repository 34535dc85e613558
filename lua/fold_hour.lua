--[[
  fold_hour: folds a closed hour into counts: the figures `activity` reports for it (active,
  returning, new: as activity_periods counts them) into its day's record, with its cohort (as
  retention counts it) kept as a list of its users' indexes, and the hour's column of the rows of the
  52 cohorts before it, as retention counts them; the day's first-timers active in it join
  those of the day's folded hours (KEYS[6]), which the day's later hours leave out of their
  new users in place of the folded hours' bitmaps. Its bitmap is then kept as it was, under
  its frozen name, which no write reaches, while the next hour's fold or figures still read
  it; and the bitmaps of hours that nothing reads any more are deleted.

  KEYS[1]  record     hash  field=hour start, ms  value="active returning new retained_1 ..."
                      (retained_k: the cohort's users active k hours later), open ("... +")
                      while the hours after it are folded, then closed, trailing zeros left
                      out (includes/cohorts.lua): the folded hours of the hour's day
  KEYS[2]  cohort     bitmap, deleted before returning
  KEYS[3]  scratch    bitmap, deleted before returning
  KEYS[4]  first_day  bitmap of the users first active on the hour's day, or their list
                      (includes/first_lists.lua)
  KEYS[5]  day        bitmap of the users active on the hour's day: where it does not exist
                      and the hour has no bitmap, nobody was active that day and nothing is
                      written for the hour (an empty shard or deployment keeps no records)
  KEYS[6]  seen       bitmap of the users first active on the hour's day who were active in
                      one of its folded hours; this hour's join them (missing where none are,
                      and for a day whose hours were folded before this bitmap was kept, whose
                      folded hours' frozen bitmaps are read instead)
  KEYS[7]  list       string: the hour's cohort, packed (includes/cohorts.lua), written where
                      it has any users
  KEYS[8..]  keys     pairs (live bitmap, frozen bitmap) of the hour and of the hours before
                      it, newest first (ARGV[3] of them before it; the day's earlier hours are
                      the first ARGV[4] of those); then the lists of the hours before it, in
                      the same order; then the records that ARGV names (ARGV[5] of them); then
                      the frozen and live bitmaps to delete once every hour the guard names is
                      folded. A pair's frozen bitmap, where it exists, is the hour's bitmap as
                      it was folded: it is read instead of the live one
  ARGV[1]  start          int ms: the hour's start, its field in `record`
  ARGV[2]  keep_until_ms  int ms: when `record` and `list` expire (its day's last hour's bitmap
                          would)
  ARGV[3]  before         int: how many hours before it are given (at most 52)
  ARGV[4]  earlier        int: how many of those are of its day
  ARGV[5]  records        int: how many records are given
  ARGV[6..5+before]  cohorts  "r start": each hour before it (its record's place among the
                          records given, 1-based, and its start, ms), in the order of KEYS
  ARGV[6+before..]  guard     "r start": the hours that must all be folded before the
                          bitmaps to delete go: every hour whose fold or figures read them (an
                          hour of a day with no record at all had nobody active, and needs none)
  Returns  {folded, deleted}: 1 if the hour was folded now (0: it was already, or its day had
           nobody active), and how many keys were deleted
  Work     about 8 BITOPs and BITCOUNTs over bitmaps of (highest user index / 8) bytes (and
           for a first-day list, a SETRANGE per run and a SETBIT per index at its ends), a
           BITPOS and a GETRANGE per 64 bytes holding the cohort's users; per open cohort of
           the 52 hours before it a BITCOUNT per run of its list and a bit tested per index at
           a run's ends (a column per hour never folded since its last, with zeros for those
           of days with nobody active), an HEXISTS per guard entry (at most 77)
]]
--- @include "first_timers"
--- @include "first_lists"
local record_key, cohort_key, scratch_key, first_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local day_key, seen_key, list_key = KEYS[5], KEYS[6], KEYS[7]
local start, keep_until_ms = ARGV[1], tonumber(ARGV[2])
local before, earlier, records = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local lists_at = 8 + 2 * (before + 1)
local records_at = lists_at + before

if redis.call('HEXISTS', record_key, start) == 1 then return {0, 0} end

-- The bitmap of the hour `back` hours before this one (0: this one): as it was folded, if it
-- was.
local function bitmap(back)
  local live, frozen = KEYS[8 + 2 * back], KEYS[9 + 2 * back]
  if redis.call('EXISTS', frozen) == 1 then return frozen end
  return live
end

-- The record and start of the hour `back` hours before this one.
local function cohort_of(back)
  local r, hour = string.match(ARGV[5 + back], '^(%d+) (%d+)$')
  return KEYS[records_at + tonumber(r) - 1], hour
end

-- The hour's figures and its cohort, into the record and its list; the hour then reads as
-- folded.
local function fold()
  local hour_key, before_key = bitmap(0), bitmap(1)
  local active = redis.call('BITCOUNT', hour_key)
  local returning = 0
  if active > 0 then
    redis.call('BITOP', 'AND', scratch_key, hour_key, before_key)
    returning = redis.call('BITCOUNT', scratch_key)
  end
  -- The cohort: first active that day, in this hour, and in none of the day's earlier hours
  -- (as retention.lua's; activity's new users of the hour are the same users).
  -- A first-day list is read as its bitmap, made in the cohort's key.
  local first = first_bitmap(first_key, cohort_key)
  -- The day's earlier hours' pairs start at KEYS[10], after the hour's.
  local starts = {}
  for back = 1, earlier do starts[back] = select(2, cohort_of(back)) end
  local had_earlier = earlier_first_timers(scratch_key, first, seen_key, record_key, 10, starts)
  redis.call('BITOP', 'AND', cohort_key, first, hour_key)
  if had_earlier then
    redis.call('BITOP', 'OR', seen_key, scratch_key, cohort_key)
    if active > 0 then
      redis.call('BITOP', 'AND', scratch_key, scratch_key, cohort_key)
      redis.call('BITOP', 'XOR', cohort_key, cohort_key, scratch_key)
    end
  else
    redis.call('BITOP', 'OR', seen_key, cohort_key)
  end
  if redis.call('EXISTS', seen_key) == 1 then redis.call('PEXPIREAT', seen_key, keep_until_ms) end
  local size = redis.call('BITCOUNT', cohort_key)
  if size > 0 then
    redis.call('SET', list_key, pack_indexes(set_bits_of(cohort_key)), 'PXAT', keep_until_ms)
  end
  write_row(record_key, start, {active, returning, size}, size > 0)
  redis.call('PEXPIREAT', record_key, keep_until_ms)
  redis.call('DEL', cohort_key, scratch_key)
  -- From now on the hour is read as it was folded: a later write into it reaches the live
  -- bitmap only, which expires by itself.
  if redis.call('EXISTS', KEYS[8]) == 1 then redis.call('RENAME', KEYS[8], KEYS[9]) end
end

-- The hour's column of each open row of the cohorts before it, and any columns before it
-- still empty (hours never folded: their bitmaps, if any, are read as they are now); a row
-- whose 52nd column is filled is closed and its list deleted.
local function fill_columns()
  for back = 1, before do
    local record, hour = cohort_of(back)
    local row = redis.call('HGET', record, hour)
    local counts, open = {}, false
    if row then counts, open = read_row(row) end
    if open and #counts - 3 < back then
      local list = KEYS[lists_at + back - 1]
      local users = unpack_runs(redis.call('GET', list))
      for column = #counts - 2, back do counts[3 + column] = count_set(bitmap(back - column), users) end
      write_row(record, hour, counts, back < COHORT_HOURS)
      if back == COHORT_HOURS then redis.call('DEL', list) end
    end
  end
end

-- An hour with no bitmap, of a day with nobody active, needs no record: none is written, so
-- that a shard or deployment with no activity keeps nothing. Its column of the cohorts
-- before it is filled all the same (with zeros), so that their lists go in time.
local folded = 0
if redis.call('EXISTS', bitmap(0)) == 1 or redis.call('EXISTS', day_key) == 1 then
  fold()
  folded = 1
end
fill_columns()

for g = 6 + before, #ARGV do
  local r, hour = string.match(ARGV[g], '^(%d+) (%d+)$')
  local guard_record = KEYS[records_at + tonumber(r) - 1]
  if redis.call('HEXISTS', guard_record, hour) == 0 and redis.call('EXISTS', guard_record) == 1 then
    return {folded, 0}
  end
end
local first_delete = records_at + records
if first_delete > #KEYS then return {folded, 0} end
return {folded, redis.call('DEL', unpack(KEYS, first_delete, #KEYS))}
