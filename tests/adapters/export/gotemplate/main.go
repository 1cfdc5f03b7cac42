// Renders Ollama-style TEMPLATEs with Go's text/template, as Ollama does: the data holds
// .Messages (each with .Role and .Content). Reads [{"template": ..., "messages": [...]}] as
// JSON on stdin, writes the rendered strings as a JSON list on stdout.
package main

import (
	"encoding/json"
	"os"
	"strings"
	"text/template"
)

type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type Case struct {
	Template string    `json:"template"`
	Messages []Message `json:"messages"`
}

func main() {
	var cases []Case
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		panic(err)
	}
	out := []string{}
	for _, c := range cases {
		tmpl := template.Must(template.New("t").Parse(c.Template))
		var b strings.Builder
		if err := tmpl.Execute(&b, map[string]any{"Messages": c.Messages}); err != nil {
			panic(err)
		}
		out = append(out, b.String())
	}
	json.NewEncoder(os.Stdout).Encode(out)
}
