package planner

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// WriteFile writes p to path as JSON, the file slotmover apply reads.
func WriteFile(path string, p *Plan) error {
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fmt.Errorf("plan file: %w", err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write the plan: %w", err)
	}
	return nil
}

// ReadFile reads a plan file that slotmover plan wrote.
func ReadFile(path string) (*Plan, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var p Plan
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if p.Format != Format {
		return nil, fmt.Errorf("%s: plan format %d, this slotmover reads %d", path, p.Format, Format)
	}
	if len(p.Moves) == 0 {
		return nil, errors.New(path + ": the plan has no moves")
	}
	return &p, nil
}
