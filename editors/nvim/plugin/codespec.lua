-- User commands; the client itself starts from require("codespec").setup({...}).
if vim.g.loaded_codespec then
  return
end
vim.g.loaded_codespec = true

vim.api.nvim_create_user_command("CodespecStats", function()
  require("codespec").show_stats()
end, { desc = "codespec: latency, acceptance and counts (codespec/stats)" })

vim.api.nvim_create_user_command("CodespecToggle", function()
  local codespec = require("codespec")
  codespec.set_enabled(not codespec.enabled)
  vim.notify("codespec " .. (codespec.enabled and "enabled" or "disabled"))
end, { desc = "codespec: turn suggestions on or off" })

vim.api.nvim_create_user_command("CodespecEnable", function()
  require("codespec").set_enabled(true)
end, { desc = "codespec: turn suggestions on" })

vim.api.nvim_create_user_command("CodespecDisable", function()
  require("codespec").set_enabled(false)
end, { desc = "codespec: turn suggestions off" })
