-- Ghost text for Neovim 0.10 / 0.11, which have no vim.lsp.inline_completion: request
-- textDocument/inlineCompletion while typing (debounced, the previous request cancelled), show the
-- first item as extmarks (inline virtual text, then virtual lines), accept all / a word / a line.
local compat = require("codespec.compat")

local api = vim.api
local M = {}

M.ns = api.nvim_create_namespace("codespec_ghost")
M.counters = { requests = 0, cancelled = 0, shown = 0, accepted = 0, stale = 0, partial = 0, errors = 0 }

local config = nil
local timer = nil
-- The request in flight: { client, id, bufnr, tick, row, col, version, position }.
local pending = nil
-- The suggestion shown: { bufnr, row, col (0-based byte column of the cursor), tick, text (what is
-- still to insert at the cursor), item, client_id, replace_after (bytes after the cursor that the
-- item's range replaces), command_sent }.
local current = nil

local INLINE_COMPLETION = "textDocument/inlineCompletion"
local TRIGGER_AUTOMATIC = 2

local function cursor()
  local pos = api.nvim_win_get_cursor(0)
  return pos[1] - 1, pos[2]
end

local function in_insert_mode()
  return api.nvim_get_mode().mode:sub(1, 1) == "i"
end

local function get_client(bufnr)
  return vim.lsp.get_clients({ bufnr = bufnr, name = "codespec" })[1]
end

local function clear_marks(bufnr)
  if bufnr and api.nvim_buf_is_valid(bufnr) then
    api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  end
end

local function render()
  local s = current
  clear_marks(s.bufnr)
  if s.text == "" then
    return
  end
  local tab = string.rep(" ", vim.bo[s.bufnr].tabstop)
  local lines = vim.split(s.text:gsub("\t", tab), "\n", { plain = true })
  local mark = { hl_mode = "combine", priority = 200 }
  if lines[1] ~= "" then
    mark.virt_text = { { lines[1], config.hl_group } }
    mark.virt_text_pos = "inline"
  end
  if #lines > 1 then
    mark.virt_lines = {}
    for i = 2, #lines do
      table.insert(mark.virt_lines, { { lines[i], config.hl_group } })
    end
  end
  api.nvim_buf_set_extmark(s.bufnr, M.ns, s.row, s.col, mark)
end

local function cancel_pending()
  if pending then
    local client = pending.client
    if not client:is_stopped() then
      compat.cancel_request(client, pending.id)
    end
    M.counters.cancelled = M.counters.cancelled + 1
    pending = nil
  end
end

--- Tell the server once per shown item whether it was taken: on accept the item's own command
--- (codespec.accept), on dismiss codespec.reject with the same arguments.
local function report(s, accepted)
  if s.command_sent or not s.item or type(s.item.command) ~= "table" then
    return
  end
  s.command_sent = true
  local client = vim.lsp.get_client_by_id(s.client_id)
  if not client then
    return
  end
  local command = s.item.command
  if not accepted then
    if command.command ~= "codespec.accept" then
      return
    end
    command = { title = "codespec: suggestion rejected", command = "codespec.reject", arguments = command.arguments }
  end
  compat.exec_cmd(client, command, s.bufnr)
end

--- Hide the suggestion and cancel the request in flight.
function M.dismiss()
  if timer then
    timer:stop()
  end
  cancel_pending()
  if current then
    clear_marks(current.bufnr)
    report(current, false)
    current = nil
  end
end

function M.is_visible()
  return current ~= nil and current.text ~= "" and current.bufnr == api.nvim_get_current_buf()
end

--- What is shown, for tests and statuslines: { text, row, col } or nil.
function M.suggestion()
  if not M.is_visible() then
    return nil
  end
  return { text = current.text, row = current.row, col = current.col, item = current.item }
end

function M.pending_request()
  return pending and { id = pending.id, row = pending.row, col = pending.col } or nil
end

local function item_text(item)
  local text = item.insertText
  if type(text) == "table" then -- StringValue (snippet): show its plain value
    text = text.value
  end
  return type(text) == "string" and text or nil
end

--- The ghost text of `item` at the cursor (row, col), or nil when the item does not continue the
--- text before the cursor. Also returns how many bytes after the cursor the item's range covers
--- (replaced on accept, e.g. an auto-inserted closing bracket).
local function ghost_from_item(bufnr, item, row, col, encoding)
  local text = item_text(item)
  if not text or text == "" then
    return nil
  end
  local range = item.range
  if not range then
    return text, 0
  end
  local line = api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ""
  if range.start.line ~= row or range["end"].line ~= row then
    return nil
  end
  local start_col = compat.byte_index(line, encoding, range.start.character)
  local end_col = compat.byte_index(line, encoding, range["end"].character)
  if start_col > col then
    return nil
  end
  local typed = line:sub(start_col + 1, col)
  if text:sub(1, #typed) ~= typed then
    return nil
  end
  return text:sub(#typed + 1), math.max(end_col - col, 0)
end

local function show(bufnr, client, item, text, replace_after)
  local row, col = cursor()
  current = {
    bufnr = bufnr,
    row = row,
    col = col,
    tick = api.nvim_buf_get_changedtick(bufnr),
    text = text,
    item = item,
    client_id = client.id,
    replace_after = replace_after or 0,
    command_sent = false,
  }
  M.counters.shown = M.counters.shown + 1
  render()
end

--- The answer still fits when the buffer, cursor and mode are as they were at request time.
local function still_fresh(request)
  if not in_insert_mode() or api.nvim_get_current_buf() ~= request.bufnr then
    return false
  end
  local row, col = cursor()
  return api.nvim_buf_get_changedtick(request.bufnr) == request.tick and row == request.row and col == request.col
end

local function on_response(request, err, result)
  if pending ~= request then
    return -- a newer request replaced this one
  end
  pending = nil
  if err then
    if err.code ~= -32800 then -- RequestCancelled is expected while typing
      M.counters.errors = M.counters.errors + 1
    end
    return
  end
  if not still_fresh(request) then
    M.counters.stale = M.counters.stale + 1
    return
  end
  local items = result and (result.items or result) or {}
  for _, item in ipairs(items) do
    local text, replace_after =
      ghost_from_item(request.bufnr, item, request.row, request.col, request.client.offset_encoding)
    if text and text ~= "" then
      show(request.bufnr, request.client, item, text, replace_after)
      return
    end
  end
  -- No usable item: drop a streamed partial suggestion.
  if current and current.item == nil then
    M.dismiss()
  end
end

--- Ask the server for a completion at the cursor, cancelling the request in flight.
function M.request()
  cancel_pending()
  local bufnr = api.nvim_get_current_buf()
  local client = get_client(bufnr)
  if not client or not in_insert_mode() or not require("codespec").enabled then
    return
  end
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  params.context = { triggerKind = TRIGGER_AUTOMATIC }
  local row, col = cursor()
  local request = {
    client = client,
    bufnr = bufnr,
    row = row,
    col = col,
    position = params.position,
    uri = params.textDocument.uri,
  }
  local ok, id = compat.request(client, INLINE_COMPLETION, params, function(err, result)
    on_response(request, err, result)
  end, bufnr)
  if ok and id then
    -- The request flushed pending didChange notifications: version and tick now describe what it saw.
    request.id = id
    request.tick = api.nvim_buf_get_changedtick(bufnr)
    request.version = compat.buf_version(bufnr)
    pending = request
    M.counters.requests = M.counters.requests + 1
  end
end

local function schedule_request()
  if not timer then
    timer = vim.uv.new_timer()
  end
  timer:stop()
  timer:start(config.debounce_ms, 0, vim.schedule_wrap(M.request))
end

--- Streaming: codespec/partialCompletion {uri, version, position, text, done} for the request in
--- flight shows the text generated so far. `text` is everything generated at `position`, which is
--- the cursor or, when the server serves a request from a generation started earlier on the line,
--- a place before it (the text typed since is then a prefix of `text`).
function M.on_partial(params, _)
  local request = pending
  if not request or type(params) ~= "table" or params.uri ~= request.uri or params.done then
    return
  end
  if type(params.text) ~= "string" or params.text == "" or type(params.position) ~= "table" then
    return
  end
  if params.version and request.version and params.version > request.version then
    return
  end
  if not still_fresh(request) then
    return
  end
  local item = { insertText = params.text, range = { start = params.position, ["end"] = params.position } }
  local text = ghost_from_item(request.bufnr, item, request.row, request.col, request.client.offset_encoding)
  if not text or text == "" then
    return
  end
  M.counters.partial = M.counters.partial + 1
  if current and current.item == nil and current.bufnr == request.bufnr then
    current.text = text
    render()
  else
    show(request.bufnr, request.client, nil, text, nil)
  end
end

--- After an edit: keep the suggestion when the user typed (or accepted) exactly its beginning,
--- otherwise dismiss it and ask again after the debounce.
local function on_text_changed()
  local bufnr = api.nvim_get_current_buf()
  if current and current.bufnr == bufnr and current.tick == api.nvim_buf_get_changedtick(bufnr) then
    return -- our own edit (a partial accept): the suggestion is already moved along
  end
  if current and current.bufnr == bufnr then
    local row, col = cursor()
    if row == current.row and col >= current.col then
      local line = api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ""
      local typed = line:sub(current.col + 1, col)
      if typed ~= "" and current.text:sub(1, #typed) == typed and not typed:find("\n", 1, true) then
        current.text = current.text:sub(#typed + 1)
        current.col = col
        current.tick = api.nvim_buf_get_changedtick(bufnr)
        if current.text ~= "" then
          render()
          return
        end
        report(current, true) -- typed all of it: as good as accepted
      end
    end
  end
  M.dismiss()
  schedule_request()
end

local function on_cursor_moved()
  if current and current.bufnr == api.nvim_get_current_buf() then
    local row, col = cursor()
    if row == current.row and col == current.col then
      return -- where the suggestion is (e.g. right after an accept or a typed-through character)
    end
  end
  if current and api.nvim_buf_get_changedtick(current.bufnr) ~= current.tick then
    return -- an edit: TextChangedI decides
  end
  M.dismiss()
  schedule_request()
end

--- Insert `text` at the cursor, replacing `replace_after` bytes after it, and move the cursor after it.
local function insert(s, text, replace_after)
  local lines = vim.split(text, "\n", { plain = true })
  local line = api.nvim_buf_get_lines(s.bufnr, s.row, s.row + 1, false)[1] or ""
  local end_col = math.min(s.col + replace_after, #line)
  api.nvim_buf_set_text(s.bufnr, s.row, s.col, s.row, end_col, lines)
  local new_row = s.row + #lines - 1
  local new_col = (#lines == 1 and s.col or 0) + #lines[#lines]
  api.nvim_win_set_cursor(0, { new_row + 1, new_col })
  return new_row, new_col
end

local function accept_part(part)
  local s = current
  if not M.is_visible() or part == "" then
    return false
  end
  local whole = part == s.text
  local row, col = insert(s, part, whole and s.replace_after or 0)
  M.counters.accepted = M.counters.accepted + (whole and 1 or 0)
  report(s, true)
  if whole then
    clear_marks(s.bufnr)
    current = nil
  else
    s.text = s.text:sub(#part + 1)
    s.row, s.col = row, col
    s.tick = api.nvim_buf_get_changedtick(s.bufnr)
    render()
  end
  return true
end

--- The next word of `text`: leading blanks, then a run of word characters or of other characters.
function M.next_word(text)
  if text:sub(1, 1) == "\n" then
    return text:match("^\n[ \t]*") or "\n"
  end
  -- Bytes >= 0x80 (UTF-8 sequences) count as word characters, so a word is never cut inside a character.
  return text:match("^[ \t]*[%w_\128-\255]+")
    or text:match("^[ \t]*[^%w_%s\128-\255]+")
    or text:match("^[ \t]+")
    or text:sub(1, 1)
end

--- The rest of the current line of `text`, or the next line when `text` starts with a newline.
function M.next_line(text)
  if text:sub(1, 1) == "\n" then
    return "\n" .. (text:sub(2):match("^[^\n]*") or "")
  end
  return text:match("^[^\n]*")
end

function M.accept()
  return M.is_visible() and accept_part(current.text)
end

function M.accept_word()
  return M.is_visible() and accept_part(M.next_word(current.text))
end

function M.accept_line()
  return M.is_visible() and accept_part(M.next_line(current.text))
end

--- An insert-mode mapping that acts only while a suggestion is shown and otherwise behaves as the
--- key did before (its previous mapping, or the plain key): Tab stays Tab.
local function map(key, action, desc)
  if not key then
    return
  end
  local previous = vim.fn.maparg(key, "i", false, true)
  local fallback = function()
    if previous.callback then
      local result = previous.callback()
      return previous.expr == 1 and result or ""
    elseif previous.rhs and previous.rhs ~= "" then
      if previous.expr == 1 then
        return api.nvim_eval(previous.rhs)
      end
      local keys = api.nvim_replace_termcodes(previous.rhs, true, true, true)
      api.nvim_feedkeys(keys, previous.noremap == 1 and "n" or "m", false)
      return ""
    end
    return key
  end
  vim.keymap.set("i", key, function()
    if M.is_visible() then
      return "<Cmd>lua require('codespec.ghost')." .. action .. "()<CR>"
    end
    return fallback()
  end, { expr = true, replace_keycodes = true, desc = "codespec: " .. desc })
end

function M.setup(user_config)
  config = user_config
  local group = api.nvim_create_augroup("codespec_ghost", { clear = true })
  api.nvim_create_autocmd("TextChangedI", { group = group, callback = on_text_changed })
  api.nvim_create_autocmd("CursorMovedI", { group = group, callback = on_cursor_moved })
  api.nvim_create_autocmd({ "InsertLeave", "BufLeave" }, { group = group, callback = M.dismiss })
  -- Entering insert mode is a natural moment to suggest (e.g. `o` on a new line).
  api.nvim_create_autocmd("InsertEnter", { group = group, callback = schedule_request })
  local keys = config.keymaps or {}
  map(keys.accept, "accept", "accept suggestion")
  map(keys.accept_word, "accept_word", "accept next word")
  map(keys.accept_line, "accept_line", "accept next line")
  map(keys.dismiss, "dismiss", "dismiss suggestion")
end

return M
