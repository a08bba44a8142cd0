package main

import (
	"github.com/spf13/cobra"
)

func completionCommand() command {
	return command{
		name:  "completion",
		usage: "bash|zsh|fish",
		summary: `Print the shell completion script for bash, zsh or fish.
It completes commands, flags, and node ids (asking the control plane the command
line names, with a 2s limit). To load it:
  bash:  source <(meshctl completion bash)     or save it in /usr/share/bash-completion/completions/meshctl
  zsh:   meshctl completion zsh > "${fpath[1]}/_meshctl"
  fish:  meshctl completion fish > ~/.config/fish/completions/meshctl.fish
The packages install all three.`,
		setup: func(c *cobra.Command, cio *cliIO) func([]string) error {
			c.ValidArgs = []cobra.Completion{"bash", "zsh", "fish"}
			return func(args []string) error {
				switch {
				case len(args) == 0:
					return usagef("name the shell: bash, zsh or fish")
				case len(args) > 1:
					return usagef("unexpected argument %q: completion takes one shell", args[1])
				}
				root := c.Root()
				switch args[0] {
				case "bash":
					return root.GenBashCompletionV2(cio.stdout, true)
				case "zsh":
					return root.GenZshCompletion(cio.stdout)
				case "fish":
					return root.GenFishCompletion(cio.stdout, true)
				}
				return usagef("no completion for %q: say bash, zsh or fish", args[0])
			}
		},
	}
}
